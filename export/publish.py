"""Writing the export into the repository, each file atomically: model.onnx, the serving
tokenizer.json, and the export.json record into every folder that reads it; where each goes is
the task's declaration's (embedding_catalog.tasks: onnx_version, tokenizer_version, records)."""

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
from embedding_catalog.tasks import Task
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


def write_record(target: Path, record: dict[str, Any]) -> None:
    """Writes an export.json record, atomically."""
    write_atomically(
        target,
        lambda temp: temp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8"),
    )


def publish(
    repository: Path, onnx_path: Path, tokenizer: Tokenizer, record: dict[str, Any], task: Task
) -> Path:
    """Writes model.onnx, the serving tokenizer.json and the export.json records into the
    repository, where the task's declaration puts them."""
    model_path = repository / task.onnx_version / "model.onnx"
    write_atomically(model_path, lambda temp: shutil.copyfile(onnx_path, temp))
    for version in task.tokenizer_versions:
        write_atomically(
            repository / version / "tokenizer.json", lambda temp: tokenizer.save(str(temp))
        )
    for version in task.records:
        write_record(repository / version / "export.json", record)
    return model_path
