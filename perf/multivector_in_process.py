"""perf/multivector.py's in-process runs, each in the environment that has its library:
MultiVectorEncoder (perf/multivector_torch.py, the export environment) and PyLate
(perf/multivector_pylate.py, build/pylate-venv, where it is installed). Their answers come back as
JSON and their vectors as .npz files in the run's work folder."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from harness.export_environment import TIMEOUT_S, run_in_export_environment
from perf.rerank_load import Point, RerankRequest
from server.paths import REPO_ROOT

PYLATE_PYTHON = REPO_ROOT / "build" / "pylate-venv" / "bin" / "python"
PYLATE_INSTALL = (
    "python -m venv build/pylate-venv && build/pylate-venv/bin/pip install pylate==1.6.0"
)


def loop_point(loop: dict[str, Any]) -> Point:
    """A timed loop's answer as a one-client Point counting texts."""
    latencies = tuple(float(value) for value in loop["latencies_ms"])
    return Point(
        concurrency=1,
        pairs=int(loop["texts"]),
        requests=len(latencies),
        seconds=float(loop["seconds"]),
        latencies_ms=latencies,
    )


def split_vectors(saved: Path) -> list[npt.NDArray[np.float32]]:
    """Each document's [n, D] vectors from an .npz of counts and vectors one after another."""
    with np.load(saved) as arrays:
        counts, vectors = arrays["counts"], arrays["vectors"]
    return list(np.split(vectors.astype(np.float32), np.cumsum(counts)[:-1]))


def _job(folder: Path, requests: Sequence[RerankRequest], seconds: float) -> dict[str, Any]:
    return {
        "model_dir": str(folder),
        "requests": [[request.query, list(request.documents)] for request in requests],
        "seconds": seconds,
    }


@dataclass(frozen=True)
class Reference:
    """MultiVectorEncoder's answers for the first request, and encode_document's loop."""

    vectors: list[npt.NDArray[np.float32]]  # per document of the first request
    scores: npt.NDArray[np.float32]  # MaxSim of its query against each of them
    encode_document: Point
    threads: int


def sentence_transformers_run(
    folder: Path, requests: Sequence[RerankRequest], seconds: float, workdir: Path
) -> Reference:
    saved = workdir / "reference.npz"
    job = {**_job(folder, requests, seconds), "reference": str(saved)}
    done = run_in_export_environment(["-m", "perf.multivector_torch"], json.dumps(job))
    answer = json.loads(done.stdout.splitlines()[-1])
    with np.load(saved) as arrays:
        scores = arrays["scores"].astype(np.float32)
    return Reference(
        split_vectors(saved), scores, loop_point(answer["loop"]), int(answer["threads"])
    )


@dataclass(frozen=True)
class PyLateRun:
    """PyLate's loop and the first request's vectors, or why there are none."""

    versions: str  # "pylate 1.6.0, sentence-transformers ..., torch ..."
    encode: Point | None
    vectors: list[npt.NDArray[np.float32]]
    why_not: str  # "" where it ran


def _saved_by(folder: Path) -> str:
    """The sentence-transformers version the folder was saved by, as it records it."""
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    return f"saved by sentence-transformers {config['__version__']['sentence_transformers']}"


def pylate_run(
    folder: Path, requests: Sequence[RerankRequest], seconds: float, workdir: Path
) -> PyLateRun:
    """PyLate on the folder, where its environment is installed."""
    if not PYLATE_PYTHON.exists():
        return PyLateRun("", None, [], f"not installed ({PYLATE_INSTALL})")
    saved = workdir / "pylate.npz"
    job = {**_job(folder, requests, seconds), "vectors": str(saved)}
    done = subprocess.run(
        [str(PYLATE_PYTHON), "-m", "perf.multivector_pylate"],
        cwd=REPO_ROOT,
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return PyLateRun("", None, [], f"its run failed: {lines[-1]}")
    # PyLate may log to stdout; the answer is the last line.
    answer = json.loads(done.stdout.splitlines()[-1])
    versions = ", ".join(f"{name} {number}" for name, number in answer["versions"].items())
    if "error" in answer:
        saved_by = _saved_by(folder)
        return PyLateRun(
            versions, None, [], f"the folder ({saved_by}) did not load: {answer['error']}"
        )
    return PyLateRun(versions, loop_point(answer["loop"]), split_vectors(saved), "")
