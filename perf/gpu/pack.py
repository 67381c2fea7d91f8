"""Pack the GPU kit: what a GPU machine without package registries needs to
serve the ensemble with the PyTorch embedder on a real Triton and measure it,
in one xz archive (`scripts/gpu_kit.sh pack`; run from `.venv`).

The archive unpacks into a tree laid out like this repository, so the
project's own paths (server/paths.py's REPO_ROOT) hold inside it:

- the project code the run needs: server/, harness/, perf/ (without its results),
  the shared and torch_gpu model repositories, the exported tokenizer.json;
- build/serializer: the C++ serializer backend built here;
- triton/: the nvidia-pytriton wheel's tritonserver, Python backend and
  stubs (this Python's and the GPU machine's), and only the shared
  libraries those load (their readelf NEEDED closure inside the wheel's
  libs folder), in the wheel's own layout so their RPATHs resolve; the run
  points PYTRITON_ROOT (server/triton_install.py) at triton/pytriton;
- build/perf_analyzer: the perf_analyzer binary with a launcher that runs it
  directly (it needs glibc >= 2.38, as the GPU machine has);
- python_packages/: tritonclient and its JSON extension for each Python version,
  and the embedding client's modules (harness/requests.py builds on them);
- numpy_cp312/: numpy 1.x for the GPU machine's Python (see STUB_NUMPY).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from server.paths import REPO_ROOT, SERIALIZER_LIBRARY, TOKENIZER_JSON

KIT_DIR = REPO_ROOT / "build" / "gpu_kit"
ARCHIVE = KIT_DIR / "gpu_kit.tar.xz"
# In the kit: the commit it was packed from, which the run records.
KIT_RECORD = "kit.json"
# The python3 of the GPU machines the kit is made for (Ubuntu 24.04; the
# environment line of perf/results/h100/report.md).
GPU_PYTHON = "3.12"
RAPIDJSON = "python-rapidjson==1.25"  # the version tritonclient's grpc client has in .venv
# Triton 2.51's Python-backend stub reads BYTES tensors wrongly under numpy 2
# (seen on the GPU machine, numpy 2.5: the tokenizer's stub died unpacking
# TEXT), so the run gives the stubs this numpy, the one .venv serves with.
STUB_NUMPY = "numpy==1.26.4"
PROJECT_FOLDERS = (
    "server",
    "harness",
    "perf",
    "model_repository/shared",
    "model_repository/torch_gpu",
)
SKIPPED = ("__pycache__", "results")
PERF_ANALYZER = REPO_ROOT / "build" / "perf_analyzer" / "wheel" / "perf_analyzer" / "bin"
PERF_ANALYZER_LAUNCHER = (
    '#!/bin/sh\nhere=$(dirname "$(readlink -f "$0")")\n'
    'exec "$here/wheel/perf_analyzer/bin/perf_analyzer" "$@"\n'
)


def _python_versions() -> list[str]:
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    return sorted({here, GPU_PYTHON})


def _needed(path: Path) -> list[str]:
    dynamic = subprocess.run(
        ["readelf", "-d", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)


def library_closure(roots: Iterable[Path], libraries: Path) -> list[Path]:
    """The files of `libraries` that `roots` load, directly or through each
    other; system libraries (libc, libstdc++, libpython) are left out."""
    found: dict[str, Path] = {}
    pending = list(roots)
    while pending:
        for name in _needed(pending.pop()):
            candidate = libraries / name
            if name not in found and candidate.is_file():
                found[name] = candidate
                pending.append(candidate)
    return sorted(found.values())


def _copy(source: Path, target: Path) -> None:
    if not source.is_file():
        raise FileNotFoundError(f"{source} is missing; run scripts/setup.sh")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


def _copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*SKIPPED), dirs_exist_ok=True)


def _commit() -> str:
    described = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return described.stdout.strip() or "unknown (not a git checkout)"


def _stage_project(stage: Path) -> None:
    (stage / KIT_RECORD).write_text(json.dumps({"commit": _commit()}))
    for folder in PROJECT_FOLDERS:
        _copy_tree(REPO_ROOT / folder, stage / folder)
    if not TOKENIZER_JSON.is_file():
        raise FileNotFoundError(f"{TOKENIZER_JSON} is missing; run scripts/setup.sh")
    _copy(SERIALIZER_LIBRARY, stage / SERIALIZER_LIBRARY.relative_to(REPO_ROOT))


def _stage_triton(stage: Path) -> None:
    # Imported here: the run (perf/gpu/run.py) reads KIT_RECORD from this
    # module where no pytriton is installed.
    import pytriton

    package = Path(pytriton.__file__).resolve().parent
    home = package / "tritonserver"
    target = stage / "triton" / "pytriton" / "tritonserver"
    executables = [
        home / "bin" / "tritonserver",
        home / "backends" / "python" / "libtriton_python.so",
    ]
    executables += [
        home / "python_backend_stubs" / version / "triton_python_backend_stub"
        for version in _python_versions()
    ]
    for path in [*executables, home / "backends" / "python" / "triton_python_backend_utils.py"]:
        _copy(path, target / path.relative_to(home))
    libraries = package.parent / "nvidia_pytriton.libs"
    for library in library_closure(executables, libraries):
        _copy(library, stage / "triton" / libraries.name / library.name)


def _stage_perf_analyzer(stage: Path) -> None:
    folder = stage / "build" / "perf_analyzer"
    _copy(
        PERF_ANALYZER / "perf_analyzer",
        folder / "wheel" / "perf_analyzer" / "bin" / "perf_analyzer",
    )
    launcher = folder / "perf_analyzer"
    launcher.write_text(PERF_ANALYZER_LAUNCHER)
    launcher.chmod(0o755)


def _stage_client(stage: Path) -> None:
    """tritonclient is pure Python; its grpc client imports python-rapidjson,
    a compiled module: this environment's, plus the GPU Python's wheel."""
    import rapidjson
    import tritonclient

    packages = stage / "python_packages"
    _copy_tree(Path(tritonclient.__file__).resolve().parent, packages / "tritonclient")
    _copy(Path(rapidjson.__file__), packages / Path(rapidjson.__file__).name)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    for version in _python_versions():
        if version != here:
            _download_rapidjson(version, packages)
    # Not the package's __init__: it imports the whole client, and with it
    # tritonclient.http's gevent and aiohttp, which the kit does not carry;
    # the run needs only the request modules (batching, transport, errors).
    client = packages / "embedding_client"
    _copy_tree(REPO_ROOT / "clients" / "embedding_client", client)
    (client / "__init__.py").write_text('"""The GPU kit\'s embedding client: modules only."""\n')
    # The catalog package the launcher and server/paths.py import (standard library only).
    _copy_tree(REPO_ROOT / "catalog" / "embedding_catalog", packages / "embedding_catalog")


def _download_wheel(requirement: str, version: str, folder: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            *("-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"),
            *("--only-binary=:all:", "--implementation", "cp", "--python-version", version),
            *("--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64"),
            *("--dest", str(folder), requirement),
        ],
        check=True,
    )
    (wheel,) = folder.glob("*.whl")
    return wheel


def _download_rapidjson(version: str, packages: Path) -> None:
    with tempfile.TemporaryDirectory() as folder:
        with zipfile.ZipFile(_download_wheel(RAPIDJSON, version, Path(folder))) as archive:
            (module,) = [
                name for name in archive.namelist() if re.fullmatch(r"rapidjson\..*\.so", name)
            ]
            (packages / module).write_bytes(archive.read(module))


def _stage_stub_numpy(stage: Path) -> None:
    target = stage / f"numpy_cp{GPU_PYTHON.replace('.', '')}"
    with tempfile.TemporaryDirectory() as folder:
        with zipfile.ZipFile(_download_wheel(STUB_NUMPY, GPU_PYTHON, Path(folder))) as archive:
            for member in archive.infolist():
                if "/tests/" not in member.filename:
                    archive.extract(member, target)
    for library in (target / "numpy").rglob("*.so"):
        library.chmod(0o755)


def pack(archive: Path = ARCHIVE) -> Path:
    """Writes the kit archive and returns its path."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent) as folder:
        stage = Path(folder)
        _stage_project(stage)
        _stage_triton(stage)
        _stage_perf_analyzer(stage)
        _stage_client(stage)
        _stage_stub_numpy(stage)
        partial = archive.with_name(archive.name + ".partial")
        # Most of the kit is x86-64 code, which the x86 filter makes smaller:
        # at preset 3 it packs in half the time of -6 (15 against 33 s on two
        # cores) for 3.4 MiB more, still well within what one device call
        # carries.
        subprocess.run(
            ["tar", "-C", str(stage), "--owner=0", "--group=0", "-cf", str(partial), "."],
            check=True,
        )
        subprocess.run(
            ["xz", "--x86", "--lzma2=preset=3", "-T0", "--force", str(partial)], check=True
        )
        partial.with_name(partial.name + ".xz").replace(archive)
    return archive


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ARCHIVE)
    args = parser.parse_args(argv)
    archive = pack(args.output.resolve())
    size = archive.stat().st_size
    print(f"{archive}: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
