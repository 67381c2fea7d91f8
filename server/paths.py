"""Where the project's files are: the model repository and its folders, the
files the export writes into them, and the C++ serializer backend as
scripts/setup.sh builds it. The launcher, the harness, perf/ and the tests
read every path from here; nothing else spells them. Standard library only
(and the catalog package, which is): the launcher runs on it alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

from embedding_catalog.exports import TOKENIZER_JSON as EXPORT_TOKENIZER_JSON
from embedding_catalog.tasks import CPU_ENGINES, EMBED, TASKS

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = REPO_ROOT / "model_repository"
# The tokenizer, serializer and ensembles, shared by every deployment; each
# embedder variant (ONNX Runtime or OpenVINO on CPU, TensorRT or PyTorch on
# GPU) has its own folder, and a server gets the shared folder plus one.
SHARED_REPOSITORY = MODEL_REPOSITORY / "shared"
ONNX_CPU_REPOSITORY = MODEL_REPOSITORY / "onnx_cpu"
# A reranker's stages and entry point (on ONNX Runtime), served only for
# catalog entries that hold one: a repository of their own, so that a
# server of embedding models never loads them.
RERANKER_REPOSITORY = MODEL_REPOSITORY / "reranker"
# A sparse encoder's encoder, serializer of sparse rows and entry point,
# likewise; its tokenizer is the shared one.
SPARSE_REPOSITORY = MODEL_REPOSITORY / "sparse"
OPENVINO_CPU_REPOSITORY = MODEL_REPOSITORY / "openvino_cpu"
# The ONNX Runtime deployment, which perf/report.py and its parts analyse.
ONNX_RUNTIME_REPOSITORIES = (SHARED_REPOSITORY, ONNX_CPU_REPOSITORY)
TOKENIZER_JSON = MODEL_REPOSITORY / EXPORT_TOKENIZER_JSON
ONNX_MODEL_DIR = ONNX_CPU_REPOSITORY / "embedder" / "1"
OPENVINO_MODEL_DIR = OPENVINO_CPU_REPOSITORY / "embedder" / "1"
SERIALIZER_BACKEND = "embedding_serializer"
SERIALIZER_FILE = f"libtriton_{SERIALIZER_BACKEND}.so"
SERIALIZER_LIBRARY = REPO_ROOT / "build" / "serializer" / SERIALIZER_FILE
BACKEND_DIRECTORY = REPO_ROOT / "build" / "triton_backends"
# The environment with torch, where export/ and the random-weight models run.
EXPORT_PYTHON = REPO_ROOT / ".venv-export" / "bin" / "python"


# Where scripts/serve.sh exports a catalog's models that have a folder of
# their own (one repository-shaped folder per model, as export/ writes it;
# EMBEDDING_EXPORTS names another, as the containers' export volume), and
# the repository it serves, written from the catalog at each start.
EXPORTS = Path(os.environ.get("EMBEDDING_EXPORTS") or REPO_ROOT / "build" / "exports")
SERVED_REPOSITORY = REPO_ROOT / "build" / "served"
# The CPU embedder folder of each engine, in MODEL_REPOSITORY and in every
# export (the bi-encoder's declaration, embedding_catalog.tasks).
ENGINE_FOLDERS = {engine: EMBED.engine_stages[engine].split("/")[0] for engine in CPU_ENGINES}
# The packaged model's TensorRT embedder and the engine that
# export/export_tensorrt.py builds on the serving GPU.
TENSORRT_FOLDER = "tensorrt_gpu"
TENSORRT_PLAN = MODEL_REPOSITORY / TENSORRT_FOLDER / "embedder_engine" / "1" / "model.plan"


def faster_cpu_engine(export_root: Path, task: str) -> str:
    """The CPU engine to serve the model of `task` exported under
    `export_root`: OpenVINO where its export measured it faster than ONNX
    Runtime on this machine at its bar (export/export_openvino.py), ONNX
    Runtime otherwise."""
    openvino = TASKS[task].openvino_version
    if openvino is None:
        return "onnxruntime"
    version = export_root / openvino
    record = version / "export.json"
    if not record.exists() or not (version / "model.xml").exists():
        return "onnxruntime"
    chosen = json.loads(record.read_text()).get("openvino", {}).get("faster_engine")
    return "openvino" if chosen == "openvino" else "onnxruntime"


def default_cpu_embedder() -> Path:
    """The packaged model's CPU embedder folder to serve."""
    return MODEL_REPOSITORY / ENGINE_FOLDERS[faster_cpu_engine(MODEL_REPOSITORY, "embed")]


def default_repositories() -> tuple[Path, Path]:
    """What a server serves unless told otherwise: the shared folder and the
    default CPU embedder, read from the export's record when asked."""
    return SHARED_REPOSITORY, default_cpu_embedder()
