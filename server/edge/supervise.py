"""Run the edge's plan (server/edge/plan.py): start Envoy on the tenants
file, apply the file again whenever it changes, log the span exports that
failed, and on SIGTERM or SIGINT take no new request and let those in
flight finish (EXIT_TIMEOUT_S, server/shutdown_timings.py) before Envoy
stops. Exit status 2: the tenants file was refused; 1: Envoy did not start
or died."""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType

from server.edge import Edge, TenantsWatcher
from server.edge.plan import EdgePlan
from server.edge.tracing import DROP_LOG_INTERVAL_S, EdgeTracing, Exports
from server.logs import log
from server.shutdown_timings import EDGE_POLL_S, EXIT_TIMEOUT_S
from server.tenants import read_tenants


def supervise(plan: EdgePlan) -> int:
    """Runs `plan` until a signal stops it; the exit status."""
    plan.envoy.state_dir.mkdir(parents=True, exist_ok=True)
    edge = Edge(plan.envoy)
    # Watching from before the file is read for the start: an edit made while
    # Envoy starts is applied once it serves, not missed.
    watcher = TenantsWatcher(edge, plan.tenants, plan.stages)
    tenants = read_tenants(plan.tenants, plan.stages)
    if isinstance(tenants, list):
        print("edge: tenants file refused:\n  " + "\n  ".join(tenants), file=sys.stderr)
        return 2
    stopping: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    error = edge.start(tenants)
    if error is not None:
        log("edge", error, level="error")
        return 1
    ports = plan.envoy.ports
    log(
        "edge",
        f"serving HTTP {ports.host}:{ports.http}, gRPC {ports.host}:{ports.grpc} "
        f"for {len(tenants.tenants)} tenants (version {edge.version})",
        stream=sys.stdout,
    )
    tracing = plan.envoy.tracing
    if tracing is not None:
        log("edge", tracing.describe())
    try:
        return _serve(edge, watcher, tracing, stopping)
    finally:
        edge.stop(EXIT_TIMEOUT_S)


def _serve(
    edge: Edge, watcher: TenantsWatcher, tracing: EdgeTracing | None, stopping: list[int]
) -> int:
    """Until a signal (0) or Envoy's death (1)."""
    exports, exports_at = Exports(), time.monotonic()
    while not stopping:
        assert edge.process is not None
        if edge.process.poll() is not None:
            log(
                "edge",
                f"envoy exited ({edge.process.returncode}); log {edge.log_path}",
                level="error",
            )
            return 1
        message = watcher.poll()
        if message is not None:
            log("edge", message)
        if tracing is not None and time.monotonic() - exports_at >= DROP_LOG_INTERVAL_S:
            exports, exports_at = _log_failed_exports(edge, tracing, exports), time.monotonic()
        time.sleep(EDGE_POLL_S)
    return 0


def _log_failed_exports(edge: Edge, tracing: EdgeTracing, before: Exports) -> Exports:
    """One warning per interval with failed span exports; the counts now."""
    try:
        now = edge.exports()
    except (OSError, ValueError):
        return before  # the admin interface is busy: the next interval says it
    failed, done = now.failed_since(before)
    if failed > 0:
        log(
            "edge",
            f"{failed} of {done} span exports to {tracing.url} failed in the last "
            f"{DROP_LOG_INTERVAL_S:.0f} s; "
            f"their spans are dropped (why: {edge.log_path})",
            level="warning",
            failed_exports=failed,
        )
    return now
