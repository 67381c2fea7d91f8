"""Triton's request priority levels as the model configs declare them
(priority_levels: 2). A module of its own so that perf.sweep, which the
compose `perf` service runs in the SDK image without the embedding client,
need not import the load generator to know them."""

INTERACTIVE = 1  # the models' default level: short queues, 1-2 s deadlines
BULK = 2  # indexing and throughput runs: longer queues, served after interactive
