"""Writing the export into the repository, each file atomically: model.onnx, the serving
tokenizer.json, and the export.json record into every folder that reads it; where each goes is
the task's RepositoryLayout (a bi-encoder's embedder, a reranker's scorer, a sparse encoder's
encoder)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
import torch
from model_folder import ModelSpec
from onnx_graph import GraphBuild
from reference_check import MIN_COSINE, CheckResult
from rerank_folder import RerankSpec
from score_check import MAX_SCORE_DIFFERENCE, ScoreCheckResult
from sparse_check import MAX_VALUE_DIFFERENCE, SparseCheckResult
from sparse_folder import SparseSpec
from sparse_head import SPARSE_INPUTS
from tokenizers import Tokenizer


@dataclass(frozen=True)
class RepositoryLayout:
    """Where a task's export goes: version folders under the repository root."""

    model: str  # model.onnx's
    tokenizer: str  # the serving tokenizer.json's
    records: tuple[str, ...]  # every folder that reads export.json


EMBED_LAYOUT = RepositoryLayout(
    "onnx_cpu/embedder/1",
    "shared/tokenizer/1",
    ("onnx_cpu/embedder/1", "torch_gpu/embedder/1", "shared/tokenizer/1"),
)
RERANK_LAYOUT = RepositoryLayout(
    "reranker/scorer/1",
    "reranker/pair_tokenizer/1",
    ("reranker/scorer/1", "reranker/pair_tokenizer/1"),
)
# The sparse encoder's texts are tokenized as a bi-encoder's, by the same tokenizer stage.
SPARSE_LAYOUT = RepositoryLayout(
    "sparse/encoder/1",
    "shared/tokenizer/1",
    ("sparse/encoder/1", "shared/tokenizer/1"),
)


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


def rerank_record(
    spec: RerankSpec, inputs: tuple[str, ...], result: ScoreCheckResult, opset: int
) -> dict[str, Any]:
    """The content of a reranker's export.json: what the scorer and the pair tokenizer need
    (inputs, max length, vocabularies, activation; prompts and default_prompt_name, which the
    pair tokenizer puts before the query, named as in the bi-encoder's record) and the check's
    results."""
    return {
        "task": "rerank",
        "graph": "plain",
        "model_dir": str(spec.model_dir),
        "model_type": spec.model_type,
        "architecture": spec.architecture,
        "modules": list(spec.modules),
        "num_labels": spec.num_labels,
        "activation": spec.activation,
        "activation_fn": spec.activation_fn,
        "inputs": list(inputs),
        "max_seq_length": spec.max_seq_length,
        "vocab_size": spec.vocab_size,
        # Token type ids must lie below it; null where the graph takes none.
        "type_vocab_size": spec.type_vocab_size if "token_type_ids" in inputs else None,
        "prompts": spec.prompts,
        "default_prompt_name": spec.default_prompt_name,
        "opset": opset,
        "max_score_difference_allowed": MAX_SCORE_DIFFERENCE,
        "max_score_difference": result.max_difference,
        "num_check_pairs": result.num_pairs,
        "check_score_differences": result.differences,
        "versions": library_versions(),
    }


def sparse_record(spec: SparseSpec, result: SparseCheckResult, opset: int) -> dict[str, Any]:
    """The content of a sparse encoder's export.json: what the encoder and the shared tokenizer
    stage need (the tokenizer stage reads max_seq_length, vocab_size, prompts and
    default_prompt_name, named as in the bi-encoder's record) and the check's results."""
    return {
        "task": "sparse",
        "graph": "plain",
        "model_dir": str(spec.model_dir),
        "model_type": spec.model_type,
        "architecture": spec.architecture,
        "modules": list(spec.modules),
        "pooling_strategy": spec.pooling_strategy,
        "activation_function": spec.activation_function,
        "inputs": list(SPARSE_INPUTS),
        "max_seq_length": spec.max_seq_length,
        # The activations' width, and the bound token ids must lie below.
        "vocab_size": spec.vocab_size,
        "prompts": spec.prompts,
        "default_prompt_name": spec.default_prompt_name,
        # How many of a row's largest values SparseEncoder.encode keeps unasked; null: all. The
        # graph returns them all.
        "max_active_dims": spec.max_active_dims,
        "opset": opset,
        "max_value_difference_allowed": MAX_VALUE_DIFFERENCE,
        "max_value_difference": result.max_difference,
        "num_check_texts": result.num_texts,
        "check_results": result.texts,
        "versions": library_versions(),
    }


def publish(
    repository: Path,
    onnx_path: Path,
    tokenizer: Tokenizer,
    record: dict[str, Any],
    layout: RepositoryLayout = EMBED_LAYOUT,
) -> Path:
    """Writes model.onnx, the serving tokenizer.json and the export.json records into the
    repository, where the task's layout puts them."""
    model_path = repository / layout.model / "model.onnx"
    write_atomically(model_path, lambda temp: shutil.copyfile(onnx_path, temp))
    write_atomically(
        repository / layout.tokenizer / "tokenizer.json",
        lambda temp: tokenizer.save(str(temp)),
    )
    for model_dir in layout.records:
        write_atomically(
            repository / model_dir / "export.json",
            lambda temp: temp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8"),
        )
    return model_path
