"""What the launcher runs, decided before anything starts: tritonserver's
command line and environment, the edge's with tenants, the ports each
listens on, the scratch folder the stages share, and the headers the admin
APIs want. Built from the launcher's arguments by pure functions (tested
without starting anything, tests/test_launch_plan.py); server/supervisor.py
runs a plan and keeps it healthy.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from server.logs import DEFAULT_FORMAT
from server.paths import default_repositories
from server.tracing import Tracing, tracing_from_arguments
from server.triton_install import Triton

# Endpoints that change or inspect the server rather than serve embeddings.
ADMIN_APIS = "model-repository,shared-memory,logging,trace"
ADMIN_KEY_HEADER = "admin-key"
ADMIN_KEY_VARIABLE = "TRITON_ADMIN_KEY"
# Read by the tokenizer's admission (model_common/model_common/admission.py)
# and the stages' shared counts (model_common/model_common/backlog.py); named
# here, not imported: the launcher runs on the standard library alone.
METRICS_URL_VARIABLE = "EMBEDDING_METRICS_URL"
BACKLOG_DIR_VARIABLE = "EMBEDDING_BACKLOG_DIR"
BACKLOG_PREFIX = "triton-embedding-backlog-"
# Where those counts live while the server runs: memory, not disk.
SHARED_MEMORY = Path("/dev/shm")
# With tenants, the edge's per-tenant stats for Prometheus are on the
# metrics port + this, on the public host.
EDGE_STATS_PORT_OFFSET = 1
# tritonserver's --log-format for each of ours. Triton 2.51 writes "default"
# (glog's I1127 08:00:00.123456 ...) or ISO8601 (2026-11-27T08:00:00Z I ...)
# lines, never JSON; ISO 8601 at least gives its lines a UTC date beside
# our JSON ones.
TRITON_LOG_FORMATS = {"json": "ISO8601", "text": None}


@dataclass(frozen=True)
class Endpoints:
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    # Where the metrics port binds when not on `host`: with tenants the
    # inference ports are internal, while the (read-only) metrics stay where
    # Prometheus scrapes them.
    metrics_host: str | None = None

    @property
    def http_address(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_address(self) -> str:
        return f"{self.metrics_host or self.host}:{self.metrics_port}"


@dataclass(frozen=True)
class InternalPorts:
    """With tenants: tritonserver's HTTP and gRPC ports behind the edge, and
    Envoy's admin port; free loopback ports only the launcher knows."""

    http: int
    grpc: int
    edge_admin: int


@dataclass(frozen=True)
class Process:
    """A process the supervisor starts; `environment` None: the launcher's own."""

    name: str
    command: tuple[str, ...]
    environment: Mapping[str, str] | None = None


@dataclass(frozen=True)
class ScratchFolder:
    """A fresh folder the supervisor makes under `parent` (None: the system's
    temporary folder) before tritonserver starts, names to it in the
    environment variable `variable`, and removes once it exits."""

    parent: Path | None
    prefix: str
    variable: str


@dataclass(frozen=True)
class LaunchPlan:
    server: Process  # tritonserver
    edge: Process | None  # `python -m server.edge`, with tenants
    endpoints: Endpoints  # where tritonserver listens
    admin_key: str | None
    scratch: ScratchFolder
    tracing: Tracing | None

    @property
    def admin_headers(self) -> dict[str, str]:
        """What the drain and the watchdog send to the admin APIs."""
        return {ADMIN_KEY_HEADER: self.admin_key} if self.admin_key else {}


def public_endpoints(args: argparse.Namespace) -> Endpoints:
    return Endpoints(args.host, args.http_port, args.grpc_port, args.metrics_port)


def internal_endpoints(public: Endpoints, ports: InternalPorts) -> Endpoints:
    """With tenants, where tritonserver listens: loopback ports only the edge
    is told of; metrics stay as asked."""
    return Endpoints("127.0.0.1", ports.http, ports.grpc, public.metrics_port, public.host)


def server_command(
    triton: Triton,
    endpoints: Endpoints,
    repositories: Sequence[Path] | None = None,
    admin_key: str | None = None,
    tracing: Tracing | None = None,
    log_format: str = DEFAULT_FORMAT,
) -> list[str]:
    """The tritonserver command line; with `admin_key`, the admin APIs answer
    only requests that carry the header `admin-key: <admin_key>`; with
    `tracing`, spans go to its OpenTelemetry collector (server/tracing.py);
    its log in the format that goes with ours (`log_format`)."""
    triton_log_format = TRITON_LOG_FORMATS[log_format]
    restricted = (
        [
            f"--http-restricted-api={ADMIN_APIS}:{ADMIN_KEY_HEADER}={admin_key}",
            f"--grpc-restricted-protocol={ADMIN_APIS}:{ADMIN_KEY_HEADER}={admin_key}",
        ]
        if admin_key
        else []
    )
    return [
        str(triton.executable),
        *(
            f"--model-repository={repository}"
            for repository in (repositories or default_repositories())
        ),
        f"--backend-directory={triton.backend_directory}",
        f"--http-address={endpoints.host}",
        f"--http-port={endpoints.http_port}",
        f"--grpc-address={endpoints.host}",
        f"--grpc-port={endpoints.grpc_port}",
        f"--metrics-address={endpoints.metrics_host or endpoints.host}",
        f"--metrics-port={endpoints.metrics_port}",
        # Explicit model control lets the watchdog reload a model whose stub died.
        "--model-control-mode=explicit",
        "--load-model=*",
        *restricted,
        *(tracing.server_arguments() if tracing else []),
        *([f"--log-format={triton_log_format}"] if triton_log_format else []),
    ]


def server_environment(
    triton: Triton, endpoints: Endpoints, base: Mapping[str, str]
) -> dict[str, str]:
    """tritonserver's environment: the launcher's (`base`) less the admin
    key, with what the stages read and the libraries and Python they need."""
    environment = dict(base)
    # The tokenizer admits work by the embedder's backlog, which it reads
    # from this server's metrics and, between readings, from counts the
    # stages keep in the scratch folder (model_common/model_common/admission.py).
    environment[METRICS_URL_VARIABLE] = f"http://{endpoints.metrics_address}/metrics"
    # tritonserver has the key on its command line already; its Python-backend
    # stubs (model code) need not inherit it.
    environment.pop(ADMIN_KEY_VARIABLE, None)
    if triton.libraries:
        environment["LD_LIBRARY_PATH"] = os.pathsep.join(
            filter(None, [str(triton.libraries), environment.get("LD_LIBRARY_PATH")])
        )
    # The stub embeds Python in isolated mode, ignoring PYTHONPATH; it finds
    # its interpreter through PATH, and Python then picks up this virtual
    # environment's site-packages from the pyvenv.cfg beside that python3.
    environment["PATH"] = os.pathsep.join(
        filter(None, [str(Path(sys.prefix) / "bin"), environment.get("PATH")])
    )
    return environment


def edge_command(
    args: argparse.Namespace, public: Endpoints, internal: Endpoints, admin_port: int
) -> list[str]:
    """`python -m server.edge` on the public ports, in front of tritonserver
    on `internal`, its per-tenant stats for Prometheus on the metrics port +
    EDGE_STATS_PORT_OFFSET; its state (the rendered Envoy config, its log)
    beside the served repository."""
    return [
        sys.executable,
        "-m",
        "server.edge",
        # Not resolved: a Kubernetes Secret volume swaps its files by
        # re-pointing a symlink, so the watcher must follow the link itself.
        f"--tenants={args.tenants.absolute()}",
        f"--host={public.host}",
        f"--http-port={public.http_port}",
        f"--grpc-port={public.grpc_port}",
        f"--admin-port={admin_port}",
        f"--stats-port={public.metrics_port + EDGE_STATS_PORT_OFFSET}",
        f"--triton-http-port={internal.http_port}",
        f"--triton-grpc-port={internal.grpc_port}",
        f"--state-dir={args.served_repository.resolve().parent / 'edge'}",
        f"--log-format={args.log_format}",
        *([] if args.model_repository else [f"--catalog={args.catalog.resolve()}"]),
        *(
            [f"--otlp-endpoint={args.otlp_endpoint}", f"--trace-sampling={args.trace_sampling}"]
            if args.otlp_endpoint
            else []
        ),
    ]


def launch_plan(
    args: argparse.Namespace,
    triton: Triton,
    repositories: Sequence[Path],
    environ: Mapping[str, str],
    internal_ports: InternalPorts | None = None,
    scratch_parent: Path | None = None,
) -> LaunchPlan:
    """The plan for these arguments, serving `repositories` on `triton`;
    the admin key from `environ`, the launcher's environment. With tenants
    (`args.tenants`), tritonserver listens on `internal_ports` and the edge
    on the public ones."""
    public = public_endpoints(args)
    endpoints = public
    edge = None
    tracing = tracing_from_arguments(args)
    if args.tenants:
        if internal_ports is None:
            raise ValueError("a plan with tenants needs the internal ports")
        endpoints = internal_endpoints(public, internal_ports)
        edge_line = edge_command(args, public, endpoints, internal_ports.edge_admin)
        edge = Process("edge", tuple(edge_line))
        if tracing:
            # Every request comes through the edge, which makes the decision
            # and sends Triton a context with each request it traces.
            tracing = replace(tracing, ratio=0.0)
    admin_key = environ.get(ADMIN_KEY_VARIABLE) or None
    command = server_command(triton, endpoints, repositories, admin_key, tracing, args.log_format)
    server = Process("tritonserver", tuple(command), server_environment(triton, endpoints, environ))
    scratch = ScratchFolder(scratch_parent, BACKLOG_PREFIX, BACKLOG_DIR_VARIABLE)
    return LaunchPlan(server, edge, endpoints, admin_key, scratch, tracing)
