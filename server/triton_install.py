"""Where tritonserver and its backends are: the nvidia-pytriton wheel's
server, with a backend directory of links made beside the build, or an
installed Triton (the NGC image's /opt/tritonserver) used as it is."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from server.paths import (
    BACKEND_DIRECTORY,
    SERIALIZER_BACKEND,
    SERIALIZER_FILE,
    SERIALIZER_LIBRARY,
)

# A folder laid out as the nvidia-pytriton wheel's `pytriton` package, with
# `nvidia_pytriton.libs` beside it, for a Python that has no pytriton: the GPU
# kit (perf/gpu) carries only the wheel's server files.
PYTRITON_ROOT_VARIABLE = "PYTRITON_ROOT"


@dataclass(frozen=True)
class Triton:
    """Where the server binary and its backends are, and the library folder
    it needs on LD_LIBRARY_PATH, if any."""

    executable: Path
    backend_directory: Path
    libraries: Path | None


def _pytriton_root() -> Path:
    carried = os.environ.get(PYTRITON_ROOT_VARIABLE)
    if carried:
        return Path(carried).resolve()
    # Imported here, not at the top: the perf tools import the launcher's
    # modules in containers that have no pytriton (the NGC images).
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
