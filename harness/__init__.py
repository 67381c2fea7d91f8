"""What tests/ and perf/ share to drive the real product: start servers and gateways on free ports, make repository variants, build requests."""
