"""Start a real Triton server (the one the nvidia-pytriton wheel ships) on
this project's model repository, with the Python backend and our C++
serializer backend, and keep it healthy while it runs.

    python -m server.launch [--host 127.0.0.1] [--http-port 8000] ...

Run it from the serving virtual environment; scripts/serve.sh does. SIGTERM
or SIGINT stops the server the way Triton stops: new requests are refused,
requests in flight finish (up to --exit-timeout-secs, 30 s).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from server.shutdown import drain
from server.watchdog import StubWatchdog

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = REPO_ROOT / "model_repository"
# The tokenizer, serializer and ensembles, shared by every deployment; each
# embedder variant (ONNX on CPU, TensorRT or PyTorch on GPU) has its own
# folder, and a server gets the shared folder plus one of them.
SHARED_REPOSITORY = MODEL_REPOSITORY / "shared"
ONNX_CPU_REPOSITORY = MODEL_REPOSITORY / "onnx_cpu"
DEFAULT_REPOSITORIES = (SHARED_REPOSITORY, ONNX_CPU_REPOSITORY)
TOKENIZER_JSON = SHARED_REPOSITORY / "tokenizer" / "1" / "tokenizer.json"
ONNX_MODEL_DIR = ONNX_CPU_REPOSITORY / "embedder" / "1"
SERIALIZER_LIBRARY = REPO_ROOT / "build" / "serializer" / "libtriton_embedding_serializer.so"
BACKEND_DIRECTORY = REPO_ROOT / "build" / "triton_backends"


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
# How long requests in flight get to finish after SIGTERM (Triton's default
# --exit-timeout-secs, which then applies again to the server's own stop).
EXIT_TIMEOUT_S = 30.0

# Endpoints that change or inspect the server rather than serve embeddings.
ADMIN_APIS = "model-repository,shared-memory,logging,trace"
ADMIN_KEY_HEADER = "admin-key"


@dataclass(frozen=True)
class Endpoints:
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002


# A folder laid out as the nvidia-pytriton wheel's `pytriton` package, with
# `nvidia_pytriton.libs` beside it, for a Python that has no pytriton: the GPU
# kit (perf/gpu) carries only the wheel's server files.
PYTRITON_ROOT_VARIABLE = "PYTRITON_ROOT"


def _pytriton_root() -> Path:
    carried = os.environ.get(PYTRITON_ROOT_VARIABLE)
    if carried:
        return Path(carried).resolve()
    # Imported here, not at the top: the perf tools import this module's
    # paths in containers that have no pytriton (the NGC SDK image).
    import pytriton

    return Path(pytriton.__file__).resolve().parent


def _triton_home() -> Path:
    return _pytriton_root() / "tritonserver"


def _link(target: Path, link: Path) -> None:
    if not target.exists():
        raise FileNotFoundError(f"{target} is missing; run scripts/setup.sh")
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def prepare_backend_directory() -> Path:
    """Lay out <dir>/<backend>/libtriton_<backend>.so as Triton expects."""
    home = _triton_home()
    python_dir = BACKEND_DIRECTORY / "python"
    serializer_dir = BACKEND_DIRECTORY / "embedding_serializer"
    python_dir.mkdir(parents=True, exist_ok=True)
    serializer_dir.mkdir(parents=True, exist_ok=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        _link(home / "backends" / "python" / name, python_dir / name)
    # The Python backend runs the stub found in its own folder; the wheel
    # ships one per Python version.
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = "triton_python_backend_stub"
    _link(home / "python_backend_stubs" / version / stub, python_dir / stub)
    _link(SERIALIZER_LIBRARY, serializer_dir / "libtriton_embedding_serializer.so")
    return BACKEND_DIRECTORY


def server_command(
    endpoints: Endpoints,
    repositories: Sequence[Path] = DEFAULT_REPOSITORIES,
    admin_key: str | None = None,
) -> list[str]:
    """The tritonserver command line; with `admin_key`, the admin APIs answer
    only requests that carry the header `admin-key: <admin_key>`."""
    restricted = (
        [
            f"--http-restricted-api={ADMIN_APIS}:{ADMIN_KEY_HEADER}={admin_key}",
            f"--grpc-restricted-protocol={ADMIN_APIS}:{ADMIN_KEY_HEADER}={admin_key}",
        ]
        if admin_key
        else []
    )
    return [
        str(_triton_home() / "bin" / "tritonserver"),
        *(f"--model-repository={repository}" for repository in repositories),
        f"--backend-directory={prepare_backend_directory()}",
        f"--http-address={endpoints.host}",
        f"--http-port={endpoints.http_port}",
        f"--grpc-address={endpoints.host}",
        f"--grpc-port={endpoints.grpc_port}",
        f"--metrics-address={endpoints.host}",
        f"--metrics-port={endpoints.metrics_port}",
        # Explicit model control lets the watchdog reload a model whose stub died.
        "--model-control-mode=explicit",
        "--load-model=*",
        *restricted,
    ]


def server_environment() -> dict[str, str]:
    environment = dict(os.environ)
    libraries = _pytriton_root().parent / "nvidia_pytriton.libs"
    environment["LD_LIBRARY_PATH"] = os.pathsep.join(
        filter(None, [str(libraries), environment.get("LD_LIBRARY_PATH")])
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


def main(argv: list[str] | None = None) -> None:
    defaults = Endpoints()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--host",
        default=defaults.host,
        help="address to bind; loopback unless you mean to expose the server",
    )
    parser.add_argument("--http-port", type=int, default=defaults.http_port)
    parser.add_argument("--grpc-port", type=int, default=defaults.grpc_port)
    parser.add_argument("--metrics-port", type=int, default=defaults.metrics_port)
    parser.add_argument(
        "--model-repository",
        type=Path,
        action="append",
        help="a model repository folder; repeat for several "
        f"(default: {' and '.join(str(p.relative_to(REPO_ROOT)) for p in DEFAULT_REPOSITORIES)})",
    )
    parser.add_argument(
        "--admin-key",
        help=f"restrict the {ADMIN_APIS} APIs to requests with the header "
        f"'{ADMIN_KEY_HEADER}: <this value>' (use it whenever the server is exposed)",
    )
    args = parser.parse_args(argv)
    endpoints = Endpoints(args.host, args.http_port, args.grpc_port, args.metrics_port)
    repositories = [path.resolve() for path in args.model_repository or DEFAULT_REPOSITORIES]
    command = server_command(endpoints, repositories, args.admin_key)
    print(
        f"tritonserver: HTTP {endpoints.host}:{endpoints.http_port}, "
        f"gRPC {endpoints.host}:{endpoints.grpc_port}, "
        f"metrics {endpoints.host}:{endpoints.metrics_port}",
        flush=True,
    )
    # Its own session: a Ctrl-C in the terminal reaches only this launcher,
    # which then stops the server gracefully.
    server = subprocess.Popen(
        command, env=server_environment(), preexec_fn=_stop_with_parent, start_new_session=True
    )
    http_url = f"{endpoints.host}:{endpoints.http_port}"
    headers = {ADMIN_KEY_HEADER: args.admin_key} if args.admin_key else {}
    watchdog = StubWatchdog(server.pid, http_url, headers)
    watchdog.start()
    stopping = threading.Event()

    def stop_gracefully() -> None:
        watchdog.stop()
        try:
            drain(http_url, headers, EXIT_TIMEOUT_S)
        finally:
            server.send_signal(signal.SIGTERM)

    def on_signal(number: int, _frame: object) -> None:
        if stopping.is_set():
            server.send_signal(number)  # a second signal: stop at once
            return
        stopping.set()
        threading.Thread(target=stop_gracefully, name="graceful-stop", daemon=True).start()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    sys.exit(server.wait())


if __name__ == "__main__":
    main()
