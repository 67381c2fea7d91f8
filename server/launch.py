"""Start a real Triton server on a model catalog (models.toml unless
--catalog names another; server/catalog.py), with the Python backend and our
C++ serializer backend, and keep it healthy while it runs.

    python -m server.launch [--catalog FILE] [--host 127.0.0.1] [--http-port 8000] ...

The catalog's models are exported where their export is missing or stale
and served from a repository written for the catalog
(server/served_repository.py); --model-repository serves folders as they
are instead. What runs (tritonserver's command line and environment, the
edge's with --tenants, the ports) is planned from the arguments first
(server/launch_plan.py), then started and watched (server/supervisor.py).

Triton comes from the nvidia-pytriton wheel of the Python running this
(scripts/serve.sh runs it from the serving virtual environment), or, with
--triton-home, from an installed Triton such as the NGC image's
/opt/tritonserver. SIGTERM or SIGINT stops the server without failing the
requests in flight: new requests are refused, those in flight finish (up to
30 s), then tritonserver stops.

With --otlp-endpoint, tritonserver sends traces (OpenTelemetry, OTLP/HTTP)
to that collector: every request that carries a W3C traceparent, and the
share --trace-sampling gives of the others (server/tracing.py). With
tenants the edge draws that share and sends spans of its own
(server/edge/tracing.py), and Triton traces what the edge traced.

Its lines (the watchdog's and the edge's too) are JSON objects, one a
line, unless --log-format text asks for the human lines (server/logs.py);
with JSON, tritonserver's own lines carry ISO 8601 UTC time stamps.

The admin key comes from the environment variable TRITON_ADMIN_KEY, never
from this launcher's arguments. Triton 2.51 reads it only from its own
command line (--http-restricted-api, --grpc-restricted-protocol; it has no
file or environment form), so it stays readable in tritonserver's
/proc/<pid>/cmdline by whoever may read that: every local user on a host
whose /proc is not mounted with hidepid=2 (or hidepid=invisible), and in a
container only the container's own processes (its own PID namespace). Where
other local users must not see it, mount /proc with hidepid=2 or serve from
the container (docker-compose.yml). The launcher's own environment is
readable only by its user and root, and tritonserver's environment does not
get the key.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from embedding_catalog.hub import DEFAULT_REVISION

from server.catalog import DEFAULT_CATALOG
from server.engine_report import engine_line
from server.launch_plan import (
    ADMIN_APIS,
    ADMIN_KEY_HEADER,
    ADMIN_KEY_VARIABLE,
    EDGE_STATS_PORT_OFFSET,
    SHARED_MEMORY,
    Endpoints,
    InternalPorts,
    LaunchPlan,
    launch_plan,
)
from server.logs import add_log_format_argument, log, use_format
from server.model_id import (
    MODEL_ID_CATALOG,
    MODEL_ID_VARIABLE,
    MODEL_REVISION_VARIABLE,
    model_id_catalog,
)
from server.paths import REPO_ROOT, SERVED_REPOSITORY, default_repositories
from server.served_repository import exported, prepare
from server.supervisor import supervise
from server.tenants import CatalogStages, read_tenants
from server.tracing import add_tracing_arguments
from server.triton_install import installed_triton, wheel_triton


def _log(message: str, level: str = "info") -> None:
    log("launcher", message, level=level)


def _free_loopback_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for each in sockets:
        each.bind(("127.0.0.1", 0))
    ports = [each.getsockname()[1] for each in sockets]
    for each in sockets:
        each.close()
    return ports


def internal_ports() -> InternalPorts:
    """With tenants: free loopback ports the OS picks for tritonserver's HTTP
    and gRPC and Envoy's admin interface."""
    return InternalPorts(*_free_loopback_ports(3))


def _add_served_arguments(parser: argparse.ArgumentParser) -> None:
    served = parser.add_mutually_exclusive_group()
    served.add_argument(
        "--catalog",
        type=Path,
        default=DEFAULT_CATALOG,
        help="the model catalog to serve: its models are exported where missing or stale and "
        "served from a repository written for it (default: %(default)s)",
    )
    served.add_argument(
        "--model-id",
        default=os.environ.get(MODEL_ID_VARIABLE) or None,
        help="serve this one Hugging Face Hub model ('org/name'), downloaded into the Hugging "
        "Face cache, instead of a catalog (default: the environment variable "
        f"{MODEL_ID_VARIABLE}, where no other catalog nor --model-repository is given)",
    )
    served.add_argument(
        "--model-repository",
        type=Path,
        action="append",
        help="serve this model repository folder as it is instead of a catalog; repeat for "
        f"several (e.g. {' and '.join(str(p.relative_to(REPO_ROOT)) for p in default_repositories())})",
    )
    parser.add_argument(
        "--revision",
        default=os.environ.get(MODEL_REVISION_VARIABLE) or DEFAULT_REVISION,
        help="with --model-id: its branch, tag or commit (default: the environment variable "
        f"{MODEL_REVISION_VARIABLE}, else %(default)s)",
    )
    parser.add_argument(
        "--name",
        help="with --model-id: the name clients call it by (default: the id's last part)",
    )
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help="with --model-id: accept pickled weights (.bin, .pt), which run code when loaded",
    )
    parser.add_argument(
        "--prepare-only",
        action="store_true",
        help="download and export the models to serve, then exit without serving (a container "
        "that prepares a volume for the servers)",
    )
    parser.add_argument(
        "--served-repository",
        type=Path,
        default=SERVED_REPOSITORY,
        help="where the catalog's repository is written (default: %(default)s)",
    )
    parser.add_argument(
        "--tokenizer-instances",
        type=int,
        help="tokenizer instances of every catalog model (default: its config's); a GPU "
        "server's embedder outruns one",
    )


def argument_parser() -> argparse.ArgumentParser:
    defaults = Endpoints()
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=f"The admin key, if any, comes from the environment variable "
        f"{ADMIN_KEY_VARIABLE}: the {ADMIN_APIS} APIs then answer only requests with "
        f"the header '{ADMIN_KEY_HEADER}: <key>'. Set it whenever the server is exposed.",
    )
    parser.add_argument(
        "--host",
        default=defaults.host,
        help="address to bind; loopback unless you mean to expose the server",
    )
    parser.add_argument("--http-port", type=int, default=defaults.http_port)
    parser.add_argument("--grpc-port", type=int, default=defaults.grpc_port)
    parser.add_argument("--metrics-port", type=int, default=defaults.metrics_port)
    _add_served_arguments(parser)
    parser.add_argument(
        "--tenants",
        type=Path,
        help="a tenants file (server/tenants.py): Envoy (server/edge) takes the HTTP and gRPC "
        "ports with each tenant's keys, models, quota and priority, and tritonserver listens "
        "on free loopback ports behind it; the edge's per-tenant stats (/stats/prometheus) take "
        f"the metrics port + {EDGE_STATS_PORT_OFFSET}",
    )
    parser.add_argument(
        "--triton-home",
        type=Path,
        help="an installed Triton: run <home>/bin/tritonserver with <home>/backends, "
        "which must hold the python and embedding_serializer backends, as the "
        "backend directory (default: the nvidia-pytriton wheel)",
    )
    add_tracing_arguments(parser)
    add_log_format_argument(parser)
    return parser


def _catalog_path(args: argparse.Namespace) -> Path:
    """The catalog to serve: --catalog's, or for --model-id one written for it
    beside the served repository (the edge and the gateway read it too)."""
    if args.model_id is None or args.catalog.resolve() != DEFAULT_CATALOG.resolve():
        return args.catalog.resolve()
    name = args.name or args.model_id.rstrip("/").split("/")[-1]
    path = args.served_repository.resolve().parent / MODEL_ID_CATALOG
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        model_id_catalog(name, args.model_id, args.revision, args.trust_pickle), encoding="utf-8"
    )
    return path


def _served(args: argparse.Namespace) -> tuple[list[Path], CatalogStages | None] | str:
    """The repositories to serve and, for a catalog, its models' stages (the
    catalog's repository written, its engines logged); or why not."""
    if args.model_repository:
        return [path.resolve() for path in args.model_repository], None
    catalog = prepare(args.catalog, args.served_repository.resolve(), args.tokenizer_instances)
    if isinstance(catalog, str):
        return catalog
    _log(f"catalog {catalog.path}: {', '.join('/'.join(m.names) for m in catalog.models)}")
    for model in catalog.models:
        _log(engine_line(model))
    return [args.served_repository.resolve()], catalog.stages()


def _announce(plan: LaunchPlan) -> None:
    endpoints = plan.endpoints
    log(
        "tritonserver",
        f"HTTP {endpoints.http_address}, "
        f"gRPC {endpoints.grpc_address}, "
        f"metrics {endpoints.metrics_address}, "
        f"admin APIs {'need the admin key' if plan.admin_key else 'open'}",
        stream=sys.stdout,
        http=endpoints.http_address,
        grpc=endpoints.grpc_address,
        metrics=endpoints.metrics_address,
        admin_key_required=bool(plan.admin_key),
    )
    if plan.tracing:
        _log(plan.tracing.describe())


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser()
    args = parser.parse_args(argv)
    use_format(args.log_format)
    if args.model_repository and args.tokenizer_instances is not None:
        parser.error("--tokenizer-instances applies to a catalog, not to --model-repository")
    if args.model_id is None and (args.name or args.trust_pickle):
        parser.error("--name and --trust-pickle apply to --model-id only")
    if not args.model_repository:
        args.catalog = _catalog_path(args)
    if args.prepare_only:
        if args.model_repository:
            parser.error("--prepare-only prepares a catalog or --model-id, not --model-repository")
        catalog = exported(args.catalog)
        if isinstance(catalog, str):
            parser.exit(2, f"launcher: {catalog}\n")
        _log(f"prepared {', '.join(model.name for model in catalog.models)}; not serving")
        return
    try:
        triton = installed_triton(args.triton_home) if args.triton_home else wheel_triton()
    except FileNotFoundError as error:
        parser.error(str(error))
    served = _served(args)
    if isinstance(served, str):
        parser.exit(2, f"launcher: {served}\n")
    repositories, stages = served
    if args.tenants:
        tenants = read_tenants(args.tenants.resolve(), stages)
        if isinstance(tenants, list):
            parser.exit(2, "launcher: tenants file refused:\n  " + "\n  ".join(tenants) + "\n")
    plan = launch_plan(
        args,
        triton,
        repositories,
        os.environ,
        internal_ports() if args.tenants else None,
        SHARED_MEMORY if SHARED_MEMORY.is_dir() else None,
    )
    _announce(plan)
    sys.exit(supervise(plan))


if __name__ == "__main__":
    main()
