"""`python -m server.edge`: Envoy in front of Triton for a tenants file,
reloaded on change, until SIGTERM or SIGINT (then it takes no new request,
and those in flight get as long to finish as the launcher gives requests at
Triton, EXIT_TIMEOUT_S of server/shutdown_timings.py). Exit status 2: the
tenants file or the arguments were refused; 1: Envoy did not start or died.
Its lines are JSON objects unless --log-format text (server/logs.py), as
the launcher that starts it. The arguments make a plan
(server/edge/plan.py), which server/edge/supervise.py runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from embedding_catalog.trace_options import DEFAULT_SAMPLING, otlp_endpoint, sampling_ratio

from server.catalog import read_catalog
from server.edge import find_envoy
from server.edge.plan import edge_plan
from server.edge.supervise import supervise
from server.logs import add_log_format_argument, use_format
from server.tenants import CatalogStages


def _add_tracing_arguments(parser: argparse.ArgumentParser) -> None:
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


def argument_parser() -> argparse.ArgumentParser:
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
    _add_tracing_arguments(parser)
    add_log_format_argument(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
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
    return supervise(edge_plan(args, envoy, stages))


if __name__ == "__main__":
    sys.exit(main())
