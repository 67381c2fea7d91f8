"""`python -m server.edge`: Envoy in front of Triton for a tenants file,
reloaded on change, until SIGTERM or SIGINT (then it takes no new request,
and those in flight get as long to finish as the launcher gives requests at
Triton, EXIT_TIMEOUT_S). Exit status 2: the tenants file or the arguments
were refused; 1: Envoy did not start or died. Its lines are JSON objects
unless --log-format text (server/logs.py), as the launcher that starts it."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from server.catalog import read_catalog
from server.edge import POLL_S, Edge, TenantsWatcher, find_envoy
from server.edge.config import EdgePorts
from server.edge.tracing import DROP_LOG_INTERVAL_S, EdgeTracing, Exports
from server.launch import EXIT_TIMEOUT_S
from server.logs import add_log_format_argument, log, use_format
from server.tenants import CatalogStages, read_tenants
from server.tracing import DEFAULT_SAMPLING, otlp_endpoint, sampling_ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.edge", description=__doc__)
    parser.add_argument("--tenants", type=Path, required=True, help="the tenants file (TOML)")
    parser.add_argument("--host", default="127.0.0.1", help="where clients reach the edge")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--admin-port", type=int, default=9901, help="Envoy admin, loopback only")
    parser.add_argument(
        "--stats-port",
        type=int,
        help="serve Envoy's /stats/prometheus (and only that) on --host at this port",
    )
    parser.add_argument("--triton-host", default="127.0.0.1")
    parser.add_argument("--triton-http-port", type=int, required=True)
    parser.add_argument("--triton-grpc-port", type=int, required=True)
    parser.add_argument("--state-dir", type=Path, required=True, help="config and log folder")
    parser.add_argument("--envoy", type=Path, default=None, help="the Envoy binary")
    parser.add_argument("--concurrency", type=int, default=1, help="Envoy worker threads")
    parser.add_argument(
        "--catalog",
        type=Path,
        default=None,
        help="the served catalog: a tenant naming a model outside it is refused, and a tenant "
        "may read (never call) the stages of its models",
    )
    parser.add_argument(
        "--otlp-endpoint",
        type=otlp_endpoint,
        default="",
        metavar="URL",
        help="send the edge's spans to this collector's OTLP/HTTP base address "
        "(server/edge/tracing.py); default: no spans",
    )
    parser.add_argument(
        "--trace-sampling",
        type=sampling_ratio,
        default=DEFAULT_SAMPLING,
        metavar="RATIO",
        help="with --otlp-endpoint, the share of requests without a traceparent to trace, "
        "0..1, drawn at random (default: %(default)s)",
    )
    add_log_format_argument(parser)
    args = parser.parse_args(argv)
    use_format(args.log_format)

    # Without a catalog a tenant may use its models' entry points only.
    stages: CatalogStages | None = None
    if args.catalog is not None:
        catalog = read_catalog(args.catalog)
        if isinstance(catalog, str):
            print(f"edge: {catalog}", file=sys.stderr)
            return 2
        stages = catalog.stages()
    envoy = args.envoy or find_envoy()
    if isinstance(envoy, str):
        print(f"edge: {envoy}", file=sys.stderr)
        return 2
    ports = EdgePorts(
        args.host,
        args.http_port,
        args.grpc_port,
        args.admin_port,
        args.triton_host,
        args.triton_http_port,
        args.triton_grpc_port,
        args.stats_port,
    )
    args.state_dir.mkdir(parents=True, exist_ok=True)
    tracing = EdgeTracing(args.otlp_endpoint, args.trace_sampling) if args.otlp_endpoint else None
    edge = Edge(ports, args.state_dir, envoy, concurrency=args.concurrency, tracing=tracing)
    # Watching from before the file is read for the start: an edit made while
    # Envoy starts is applied once it serves, not missed.
    watcher = TenantsWatcher(edge, args.tenants, stages)
    tenants = read_tenants(args.tenants, stages)
    if isinstance(tenants, list):
        print("edge: tenants file refused:\n  " + "\n  ".join(tenants), file=sys.stderr)
        return 2
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    error = edge.start(tenants)
    if error is not None:
        log("edge", error, level="error")
        return 1
    log(
        "edge",
        f"serving HTTP {args.host}:{args.http_port}, gRPC {args.host}:{args.grpc_port} "
        f"for {len(tenants.tenants)} tenants (version {edge.version})",
        stream=sys.stdout,
    )
    if tracing is not None:
        log("edge", tracing.describe())
    exports, exports_at = Exports(), time.monotonic()
    try:
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
            time.sleep(POLL_S)
    finally:
        edge.stop(EXIT_TIMEOUT_S)
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


if __name__ == "__main__":
    sys.exit(main())
