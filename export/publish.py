"""Writing the export into the repository, each file atomically: model.onnx, the serving
tokenizer.json, and the export.json record into every folder that reads it."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
import torch
from model_folder import ModelSpec
from onnx_graph import GraphBuild
from reference_check import MIN_COSINE, CheckResult
from tokenizers import Tokenizer


def write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """Writes target through a temporary file in the same directory and os.replace."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    os.close(handle)
    temp_path = Path(temp_name)
    try:
        write(temp_path)
        # mkstemp creates the file 0600; the server may run as another user.
        temp_path.chmod(0o644)
        os.replace(temp_path, target)
    except BaseException:
        temp_path.unlink(missing_ok=True)
        raise


def library_versions() -> dict[str, str]:
    """Versions of the libraries that produced and checked the export."""
    import sentence_transformers

    return {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
        "sentence_transformers": sentence_transformers.__version__,
    }


def export_record(
    spec: ModelSpec, result: CheckResult, opset: int, build: GraphBuild
) -> dict[str, Any]:
    """The content of export.json."""
    return {
        "graph": build.kind,
        "fusions": build.fusions,
        "quantization": build.quantization,
        "min_cosine_required": MIN_COSINE[build.kind],
        "model_dir": str(spec.model_dir),
        "model_type": spec.model_type,
        "modules": list(spec.modules),
        "pooling": spec.pooling,
        "embedding_dim": result.embedding_dim,
        "max_seq_length": spec.max_seq_length,
        "vocab_size": spec.vocab_size,
        # What the tokenizer stage puts before a text asked for with prompt_name (plain string
        # concatenation, as sentence-transformers does), and the prompt it applies unasked.
        "prompts": spec.prompts,
        "default_prompt_name": spec.default_prompt_name,
        "opset": opset,
        "min_cosine": result.min_cosine,
        "num_check_texts": result.num_texts,
        "check_cosines": result.cosines,
        "versions": library_versions(),
    }


# The version folders of the models that read export.json.
RECORD_FOLDERS = ("onnx_cpu/embedder/1", "torch_gpu/embedder/1", "shared/tokenizer/1")


def publish(
    repository: Path, onnx_path: Path, tokenizer: Tokenizer, record: dict[str, Any]
) -> Path:
    """Writes model.onnx, the serving tokenizer.json and the export.json records into the
    repository."""
    model_path = repository / "onnx_cpu" / "embedder" / "1" / "model.onnx"
    write_atomically(model_path, lambda temp: shutil.copyfile(onnx_path, temp))
    write_atomically(
        repository / "shared" / "tokenizer" / "1" / "tokenizer.json",
        lambda temp: tokenizer.save(str(temp)),
    )
    for model_dir in RECORD_FOLDERS:
        write_atomically(
            repository / model_dir / "export.json",
            lambda temp: temp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8"),
        )
    return model_path
