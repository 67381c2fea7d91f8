"""Start a real Triton server (the one the nvidia-pytriton wheel ships) on
this project's model repository, with the Python backend and our C++
serializer backend.

    python -m server.launch [--host 127.0.0.1] [--http-port 8000] ...

Run it from the serving virtual environment; scripts/serve.sh does.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytriton

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = REPO_ROOT / "model_repository"
SERIALIZER_LIBRARY = REPO_ROOT / "build" / "serializer" / "libtriton_embedding_serializer.so"
BACKEND_DIRECTORY = REPO_ROOT / "build" / "triton_backends"


@dataclass(frozen=True)
class Endpoints:
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002


def _triton_home() -> Path:
    return Path(pytriton.__file__).resolve().parent / "tritonserver"


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


def server_command(endpoints: Endpoints, repository: Path = MODEL_REPOSITORY) -> list[str]:
    return [
        str(_triton_home() / "bin" / "tritonserver"),
        f"--model-repository={repository}",
        f"--backend-directory={prepare_backend_directory()}",
        f"--http-address={endpoints.host}",
        f"--http-port={endpoints.http_port}",
        f"--grpc-address={endpoints.host}",
        f"--grpc-port={endpoints.grpc_port}",
        f"--metrics-address={endpoints.host}",
        f"--metrics-port={endpoints.metrics_port}",
    ]


def server_environment() -> dict[str, str]:
    environment = dict(os.environ)
    libraries = Path(pytriton.__file__).resolve().parent.parent / "nvidia_pytriton.libs"
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
    parser.add_argument("--model-repository", type=Path, default=MODEL_REPOSITORY)
    args = parser.parse_args(argv)
    endpoints = Endpoints(args.host, args.http_port, args.grpc_port, args.metrics_port)
    command = server_command(endpoints, args.model_repository.resolve())
    print(
        f"tritonserver: HTTP {endpoints.host}:{endpoints.http_port}, "
        f"gRPC {endpoints.host}:{endpoints.grpc_port}, "
        f"metrics {endpoints.host}:{endpoints.metrics_port}",
        flush=True,
    )
    os.execve(command[0], command, server_environment())


if __name__ == "__main__":
    main()
