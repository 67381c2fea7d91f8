"""Loading the sentence-transformers model the graph is traced from and checked against, of the
class the task's declaration names (embedding_catalog.tasks: SentenceTransformer, CrossEncoder,
SparseEncoder): on CPU, in float32, offline, checked to be the very model its folder's spec
describes (the task's own identity check), truncating where the spec does."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from model_folder import FolderSpec

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder, SentenceTransformer, SparseEncoder

Spec = TypeVar("Spec", bound=FolderSpec)
Model = TypeVar("Model")


def load_model(model_dir: Path, model_type: str) -> Any:
    """Loads the folder as sentence-transformers' model_type class on CPU, in float32, without
    network access."""
    # huggingface_hub reads this once, when it is first imported (through sentence_transformers).
    os.environ["HF_HUB_OFFLINE"] = "1"
    import sentence_transformers

    model_class = getattr(sentence_transformers, model_type)
    # The graph serves float32. transformers would load a checkpoint saved in bfloat16 (as
    # Qwen3-Embedding's is) in bfloat16, which neither traces to ONNX nor is what the graph
    # computes; float32 holds those weights exactly.
    return model_class(str(model_dir), device="cpu", model_kwargs={"dtype": torch.float32})


def load_checked(spec: Spec, model_type: str, identity: Callable[[Spec, Model], None]) -> Model:
    """Loads the model, refuses it unless `identity` finds it the one the spec describes, and
    makes it truncate at the spec's max_seq_length."""
    model = load_model(spec.model_dir, model_type)
    identity(spec, model)
    if model.max_seq_length != spec.max_seq_length:
        # Only where the tokenizer sets no usable limit: the encoder's positions bound both.
        print(
            f"max_seq_length: sentence-transformers reads {model.max_seq_length}, the encoder "
            f"has {spec.max_seq_length} positions; both truncate at {spec.max_seq_length}"
        )
        model.max_seq_length = spec.max_seq_length
    return model


def hf_encoder(model: SentenceTransformer | CrossEncoder | SparseEncoder) -> torch.nn.Module:
    """Returns the Hugging Face model inside the sentence-transformers Transformer module (a
    CrossEncoder's: the sequence classifier; a SparseEncoder's: the masked language model)."""
    for module in model:
        if hasattr(module, "auto_model"):
            return module.auto_model
    raise SystemExit("the sentence-transformers model has no Transformer module with an auto_model")
