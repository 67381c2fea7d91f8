"""How long each part of a stop may take: the launcher's supervisor
(server/supervisor.py), the stub watchdog and the edge (server/edge) all
read these, so their budgets add up as the chart's and compose's grace
periods expect (tests/test_helm_chart.py, tests/test_compose.py).

A stop, with tenants: the edge closes its ports and lets the requests in
flight through it finish (EXIT_TIMEOUT_S), then stops Envoy (within
EDGE_STOP_MARGIN_S); the watchdog finishes a reload in progress
(WATCHDOG_STOP_TIMEOUT_S); Triton drains what is left of EXIT_TIMEOUT_S,
then stops (EXIT_TIMEOUT_S again, its own --exit-timeout-secs).
"""

from __future__ import annotations

# How long requests in flight get to finish after SIGTERM (Triton's default
# --exit-timeout-secs, which then applies again to the server's own stop).
EXIT_TIMEOUT_S = 30.0
# With tenants, how long the edge gets beyond EXIT_TIMEOUT_S to stop Envoy
# before it is killed; Envoy then gets SIGTERM from the kernel.
EDGE_STOP_MARGIN_S = 13.0
# How often `python -m server.edge` looks at its signals and the tenants file.
EDGE_POLL_S = 1.0
# The longest a call to Envoy's admin interface waits.
ENVOY_ADMIN_TIMEOUT_S = 2.0
# How long Envoy gets to exit on SIGTERM before it is killed: the edge's
# margin, less the signal seen at the next poll and an admin call timing
# out at the drain's deadline.
ENVOY_EXIT_S = EDGE_STOP_MARGIN_S - EDGE_POLL_S - ENVOY_ADMIN_TIMEOUT_S
# How long the watchdog's stop waits for a reload in progress (about 3 s on
# CPU); one still running then is abandoned.
WATCHDOG_STOP_TIMEOUT_S = 10.0
