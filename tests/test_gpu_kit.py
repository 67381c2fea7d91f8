"""The GPU kit (perf/gpu/, scripts/gpu_kit.sh) on CPU, so it still works the
next time a GPU is lent: packed here, unpacked into a temporary folder, and
the torch_gpu embedder served on a CPU instance from the unpacked tree (its
tritonserver, stubs, serializer and tritonclient), checked against
sentence-transformers on the same weights. The committed GPU report must be
what perf.gpu.report makes of the committed runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from perf.gpu.report import load_runs, render
from perf.gpu.served import ServerSetup
from server.paths import EXPORT_PYTHON, REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "gpu_kit.sh"
ARCHIVE = REPO_ROOT / "build" / "gpu_kit" / "gpu_kit.tar.xz"
H100_RESULTS = REPO_ROOT / "perf" / "results" / "h100"
# What one device call carries is 64 MiB, the project's tracked files included.
MAX_ARCHIVE_MIB = 48


@pytest.fixture(scope="module")
def packed() -> Path:
    completed = subprocess.run(
        [str(SCRIPT), "pack"], capture_output=True, text=True, timeout=900, check=False
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert re.search(r"gpu_kit\.tar\.xz: [\d.]+ MiB", completed.stdout), completed.stdout
    return ARCHIVE


def test_the_kit_holds_what_the_gpu_run_needs_and_stays_small(packed: Path) -> None:
    assert packed.stat().st_size < MAX_ARCHIVE_MIB * 2**20
    with tarfile.open(packed) as archive:
        names = {name.removeprefix("./") for name in archive.getnames()}
    stubs = "triton/pytriton/tritonserver/python_backend_stubs"
    for needed in (
        "kit.json",
        "triton/pytriton/tritonserver/bin/tritonserver",
        "triton/pytriton/tritonserver/backends/python/libtriton_python.so",
        f"{stubs}/3.12/triton_python_backend_stub",
        f"{stubs}/3.11/triton_python_backend_stub",
        "build/serializer/libtriton_embedding_serializer.so",
        "build/perf_analyzer/perf_analyzer",
        "python_packages/tritonclient/grpc/__init__.py",
        "numpy_cp312/numpy/__init__.py",
        "model_repository/shared/tokenizer/1/tokenizer.json",
        "model_repository/torch_gpu/embedder/1/model.py",
        "perf/gpu/run.py",
    ):
        assert needed in names, needed
    libraries = {
        Path(name).name for name in names if name.startswith("triton/nvidia_pytriton.libs/")
    }
    assert any(name.startswith("libtritonserver") for name in libraries)
    # Only what the server loads: not the wheel's libpython for its own proxy.
    assert not any(name.startswith("libpython") for name in libraries)


def test_the_unpacked_kit_serves_the_torch_embedder_on_cpu(packed: Path, tmp_path: Path) -> None:
    kit, out, workdir = tmp_path / "kit", tmp_path / "out", tmp_path / "work"
    environment = dict(os.environ, GPU_KIT_DIR=str(kit), GPU_KIT_PYTHON=str(EXPORT_PYTHON))
    completed = subprocess.run(
        [str(SCRIPT), "run", str(out), "--device", "cpu", "--serve", "minilm:e1:t1:r64"]
        + ["--workdir", str(workdir)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["errors"] == []
    (served,) = results["served"]
    assert served["device"] == "cpu"
    assert served["check"]["texts"] >= 9
    assert served["check"]["min_cosine"] >= 0.9999, served["check"]
    assert (out / "report.md").is_file() and (out / "logs.tar.gz").is_file()
    # Served from the unpacked tree, not from this checkout.
    log = (workdir / "served" / "minilm-e1-t1-r64" / "tritonserver.log").read_text()
    python_backend = kit / "build" / "triton_backends" / "python" / "libtriton_python.so"
    assert re.search(rf"\| python +\| {re.escape(str(python_backend))} ", log), log[-3000:]
    assert python_backend.resolve().is_relative_to(kit / "triton")


@pytest.mark.parametrize(
    "spec", ["minilm", "bert-base:e4:t8", "bert-base:e4:t8:r256:medium", "bert base:e1:t1:r1"]
)
def test_a_bad_setup_is_refused_with_its_form(spec: str) -> None:
    with pytest.raises(ValueError, match="SHAPE:eN:tN:rN|unknown workloads"):
        ServerSetup.parse(spec)


def test_the_committed_gpu_report_is_made_from_the_committed_runs() -> None:
    runs = sorted(H100_RESULTS.glob("run*.json"))
    assert runs, f"no runs in {H100_RESULTS}"
    assert (H100_RESULTS / "report.md").read_text() == render(load_runs(runs))
