"""Start a real Triton server on a model catalog (models.toml unless
--catalog names another; server/catalog.py), with the Python backend and our
C++ serializer backend, and keep it healthy while it runs.

    python -m server.launch [--catalog FILE] [--host 127.0.0.1] [--http-port 8000] ...

The catalog's models are exported where their export is missing or stale
and served from a repository written for the catalog
(server/served_repository.py); --model-repository serves folders as they
are instead.

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
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from server.catalog import DEFAULT_CATALOG
from server.engine_report import engine_line
from server.logs import DEFAULT_FORMAT, add_log_format_argument, log, use_format
from server.paths import (
    BACKEND_DIRECTORY,
    REPO_ROOT,
    SERIALIZER_BACKEND,
    SERIALIZER_FILE,
    SERIALIZER_LIBRARY,
    SERVED_REPOSITORY,
    default_repositories,
)
from server.served_repository import prepare
from server.shutdown import drain
from server.tenants import read_tenants
from server.tracing import Tracing, add_tracing_arguments, tracing_from_arguments
from server.watchdog import StubWatchdog

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
# How long requests in flight get to finish after SIGTERM (Triton's default
# --exit-timeout-secs, which then applies again to the server's own stop).
EXIT_TIMEOUT_S = 30.0
# With tenants, how long the edge (server/edge) gets beyond EXIT_TIMEOUT_S
# to stop Envoy before it is killed; Envoy then gets SIGTERM from the kernel.
EDGE_STOP_MARGIN_S = 13.0

# Endpoints that change or inspect the server rather than serve embeddings.
ADMIN_APIS = "model-repository,shared-memory,logging,trace"
ADMIN_KEY_HEADER = "admin-key"
ADMIN_KEY_VARIABLE = "TRITON_ADMIN_KEY"
# Read by the tokenizer's admission (model_common/model_common/admission.py)
# and the stages' shared counts (model_common/model_common/backlog.py); named
# here, not imported: the launcher runs on the standard library alone.
METRICS_URL_VARIABLE = "EMBEDDING_METRICS_URL"
BACKLOG_DIR_VARIABLE = "EMBEDDING_BACKLOG_DIR"
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
class Triton:
    """Where the server binary and its backends are, and the library folder
    it needs on LD_LIBRARY_PATH, if any."""

    executable: Path
    backend_directory: Path
    libraries: Path | None


# A folder laid out as the nvidia-pytriton wheel's `pytriton` package, with
# `nvidia_pytriton.libs` beside it, for a Python that has no pytriton: the GPU
# kit (perf/gpu) carries only the wheel's server files.
PYTRITON_ROOT_VARIABLE = "PYTRITON_ROOT"


def _pytriton_root() -> Path:
    carried = os.environ.get(PYTRITON_ROOT_VARIABLE)
    if carried:
        return Path(carried).resolve()
    # Imported here, not at the top: the perf tools import this module's
    # paths in containers that have no pytriton (the NGC images).
    import pytriton

    return Path(pytriton.__file__).resolve().parent


def _link(target: Path, link: Path) -> None:
    if not target.exists():
        raise FileNotFoundError(f"{target} is missing; run scripts/setup.sh")
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def prepare_backend_directory(home: Path) -> Path:
    """Lay out <dir>/<backend>/libtriton_<backend>.so as Triton expects, from
    the wheel's Triton `home` and the serializer built by scripts/setup.sh."""
    python_dir = BACKEND_DIRECTORY / "python"
    serializer_dir = BACKEND_DIRECTORY / SERIALIZER_BACKEND
    python_dir.mkdir(parents=True, exist_ok=True)
    serializer_dir.mkdir(parents=True, exist_ok=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        _link(home / "backends" / "python" / name, python_dir / name)
    # The Python backend runs the stub found in its own folder; the wheel
    # ships one per Python version.
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = "triton_python_backend_stub"
    _link(home / "python_backend_stubs" / version / stub, python_dir / stub)
    _link(SERIALIZER_LIBRARY, serializer_dir / SERIALIZER_FILE)
    return BACKEND_DIRECTORY


def wheel_triton() -> Triton:
    """The server of the nvidia-pytriton wheel, with a backend directory of
    links to its Python backend and to our serializer."""
    root = _pytriton_root()
    home = root / "tritonserver"
    return Triton(
        executable=home / "bin" / "tritonserver",
        backend_directory=prepare_backend_directory(home),
        libraries=root.parent / "nvidia_pytriton.libs",
    )


def installed_triton(home: Path) -> Triton:
    """An installed Triton (the NGC image's /opt/tritonserver): <home>/bin/
    tritonserver, with <home>/backends, where the image has put the
    serializer, as the backend directory as is. Its libraries are found as
    the installation arranged (RPATH, the image's environment)."""
    triton = Triton(home / "bin" / "tritonserver", home / "backends", None)
    needed = (
        triton.executable,
        triton.backend_directory / "python" / "libtriton_python.so",
        triton.backend_directory / SERIALIZER_BACKEND / SERIALIZER_FILE,
    )
    missing = [str(path) for path in needed if not path.exists()]
    if missing:
        raise FileNotFoundError(f"--triton-home {home}: missing {', '.join(missing)}")
    return triton


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


def server_environment(triton: Triton, endpoints: Endpoints, backlog_dir: Path) -> dict[str, str]:
    environment = dict(os.environ)
    # The tokenizer admits work by the embedder's backlog, which it reads
    # from this server's metrics and, between readings, from counts the
    # stages keep in `backlog_dir` (model_common/model_common/admission.py).
    environment[METRICS_URL_VARIABLE] = f"http://{endpoints.metrics_address}/metrics"
    environment[BACKLOG_DIR_VARIABLE] = str(backlog_dir)
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


def _stop_with_parent() -> None:
    """Runs in the child: the kernel sends it SIGTERM if this launcher dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


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


def internal_endpoints(public: Endpoints) -> Endpoints:
    """With tenants, tritonserver's HTTP and gRPC ports: free loopback ports
    the OS picks, which only the edge is told of; metrics stay as asked."""
    http_port, grpc_port = _free_loopback_ports(2)
    return Endpoints("127.0.0.1", http_port, grpc_port, public.metrics_port, public.host)


def edge_command(args: argparse.Namespace, public: Endpoints, internal: Endpoints) -> list[str]:
    """`python -m server.edge` on the public ports, in front of tritonserver
    on `internal`, its per-tenant stats for Prometheus on the metrics port +
    1; its state (the rendered Envoy config, its log) beside the served
    repository."""
    (admin_port,) = _free_loopback_ports(1)
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
    served = parser.add_mutually_exclusive_group()
    served.add_argument(
        "--catalog",
        type=Path,
        default=DEFAULT_CATALOG,
        help="the model catalog to serve: its models are exported where missing or stale and "
        "served from a repository written for it (default: %(default)s)",
    )
    served.add_argument(
        "--model-repository",
        type=Path,
        action="append",
        help="serve this model repository folder as it is instead of a catalog; repeat for "
        f"several (e.g. {' and '.join(str(p.relative_to(REPO_ROOT)) for p in default_repositories())})",
    )
    parser.add_argument(
        "--served-repository",
        type=Path,
        default=SERVED_REPOSITORY,
        help="where the catalog's repository is written (default: %(default)s)",
    )
    parser.add_argument(
        "--tenants",
        type=Path,
        help="a tenants file (server/tenants.py): Envoy (server/edge) takes the HTTP and gRPC "
        "ports with each tenant's keys, models, quota and priority, and tritonserver listens "
        "on free loopback ports behind it; the edge's per-tenant stats (/stats/prometheus) take "
        "the metrics port + 1",
    )
    parser.add_argument(
        "--tokenizer-instances",
        type=int,
        help="tokenizer instances of every catalog model (default: its config's); a GPU "
        "server's embedder outruns one",
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


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser()
    args = parser.parse_args(argv)
    use_format(args.log_format)
    try:
        triton = installed_triton(args.triton_home) if args.triton_home else wheel_triton()
    except FileNotFoundError as error:
        parser.error(str(error))
    public = Endpoints(args.host, args.http_port, args.grpc_port, args.metrics_port)
    endpoints = internal_endpoints(public) if args.tenants else public
    catalog = None
    if args.model_repository:
        if args.tokenizer_instances is not None:
            parser.error("--tokenizer-instances applies to a catalog, not to --model-repository")
        repositories = [path.resolve() for path in args.model_repository]
    else:
        catalog = prepare(
            args.catalog.resolve(), args.served_repository.resolve(), args.tokenizer_instances
        )
        if isinstance(catalog, str):
            parser.exit(2, f"launcher: {catalog}\n")
        _log(f"catalog {catalog.path}: {', '.join('/'.join(m.names) for m in catalog.models)}")
        for model in catalog.models:
            _log(engine_line(model))
        repositories = [args.served_repository.resolve()]
    if args.tenants:
        stages = None if catalog is None else catalog.stages()
        tenants = read_tenants(args.tenants.resolve(), stages)
        if isinstance(tenants, list):
            parser.exit(2, "launcher: tenants file refused:\n  " + "\n  ".join(tenants) + "\n")
    admin_key = os.environ.get(ADMIN_KEY_VARIABLE) or None
    tracing = tracing_from_arguments(args)
    if tracing and args.tenants:
        # Every request comes through the edge, which makes the decision
        # and sends Triton a context with each request it traces.
        tracing = replace(tracing, ratio=0.0)
    command = server_command(triton, endpoints, repositories, admin_key, tracing, args.log_format)
    log(
        "tritonserver",
        f"HTTP {endpoints.http_address}, "
        f"gRPC {endpoints.grpc_address}, "
        f"metrics {endpoints.metrics_address}, "
        f"admin APIs {'need the admin key' if admin_key else 'open'}",
        stream=sys.stdout,
        http=endpoints.http_address,
        grpc=endpoints.grpc_address,
        metrics=endpoints.metrics_address,
        admin_key_required=bool(admin_key),
    )
    if tracing:
        _log(tracing.describe())
    backlog_dir = Path(
        tempfile.mkdtemp(
            prefix="triton-embedding-backlog-",
            dir=SHARED_MEMORY if SHARED_MEMORY.is_dir() else None,
        )
    )
    # Its own session: a Ctrl-C in the terminal reaches only this launcher,
    # which then stops the server gracefully.
    server = subprocess.Popen(
        command,
        env=server_environment(triton, endpoints, backlog_dir),
        preexec_fn=_stop_with_parent,
        start_new_session=True,
    )
    edge = (
        subprocess.Popen(
            edge_command(args, public, endpoints),
            preexec_fn=_stop_with_parent,
            start_new_session=True,
        )
        if args.tenants
        else None
    )
    http_url = endpoints.http_address
    headers = {ADMIN_KEY_HEADER: admin_key} if admin_key else {}
    watchdog = StubWatchdog(server.pid, http_url, headers, orphan_grace_s=EXIT_TIMEOUT_S)
    watchdog.start()
    stopping = threading.Event()

    def stop_gracefully() -> None:
        # The edge first: it stops taking requests and lets those in flight
        # through it finish, up to EXIT_TIMEOUT_S (server/edge).
        # Then the watchdog: a reload in progress finishes before the drain,
        # and no reload starts while it runs.
        drain_s = EXIT_TIMEOUT_S
        if edge is not None and edge.poll() is None:
            _log("stopping the edge")
            started = time.monotonic()
            edge.send_signal(signal.SIGTERM)
            try:
                edge.wait(timeout=EXIT_TIMEOUT_S + EDGE_STOP_MARGIN_S)
            except subprocess.TimeoutExpired:
                edge.kill()
            # With tenants every request came through the edge: those it let
            # finish are done, and Triton's drain has what is left of the
            # same EXIT_TIMEOUT_S, so the two never add up.
            drain_s = max(0.0, EXIT_TIMEOUT_S - (time.monotonic() - started))
        watchdog.stop()
        _log("draining: new requests are refused, those in flight finish")
        try:
            drain(http_url, headers, drain_s)
        finally:
            _log("stopping tritonserver")
            server.send_signal(signal.SIGTERM)

    def on_signal(number: int, _frame: object) -> None:
        if stopping.is_set():
            server.send_signal(number)  # a second signal: stop at once
            return
        stopping.set()
        threading.Thread(target=stop_gracefully, name="graceful-stop", daemon=True).start()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    if edge is not None:
        threading.Thread(
            target=_stop_when_edge_exits, args=(edge, stopping, on_signal), daemon=True
        ).start()
    try:
        code = server.wait()
    finally:
        shutil.rmtree(backlog_dir, ignore_errors=True)
    sys.exit(code)


def _stop_when_edge_exits(
    edge: subprocess.Popen[bytes],
    stopping: threading.Event,
    on_signal: Callable[[int, object], None],
) -> None:
    """Without its edge a server with tenants must not keep running: its
    clients could no longer reach it, and nothing would say so."""
    code = edge.wait()
    if not stopping.is_set():
        _log(f"the edge exited ({code}); stopping", level="error")
        on_signal(signal.SIGTERM, None)


if __name__ == "__main__":
    main()
