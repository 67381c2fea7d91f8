"""Loading the sentence-transformers model the graph is traced from and checked against: on CPU,
in float32, offline, and the very model its folder's ModelSpec describes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from model_families import SUPPORTED_MODEL_TYPES
from model_folder import ModelSpec

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


def load_sentence_transformer(model_dir: Path) -> SentenceTransformer:
    """Loads the model on CPU, in float32, without network access."""
    # huggingface_hub reads this once, when it is first imported (through sentence_transformers).
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    # The graph serves float32. transformers would load a checkpoint saved in bfloat16 (as
    # Qwen3-Embedding's is) in bfloat16, which neither traces to ONNX nor is what the graph
    # computes; float32 holds those weights exactly.
    return SentenceTransformer(str(model_dir), device="cpu", model_kwargs={"dtype": torch.float32})


def load_checked_model(spec: ModelSpec) -> SentenceTransformer:
    """Loads the model and makes sure it is the one the spec describes: the architecture and the
    max length sentence-transformers truncates at."""
    model = load_sentence_transformer(spec.model_dir)
    encoder = hf_encoder(model)
    expected = SUPPORTED_MODEL_TYPES[spec.model_type]
    if type(encoder).__name__ != expected:
        raise SystemExit(
            f"{spec.model_dir}: model_type {spec.model_type!r} loaded as "
            f"{type(encoder).__name__}, expected transformers' {expected}"
        )
    if model.max_seq_length != spec.max_seq_length:
        # Only where the tokenizer sets no usable limit: the encoder's positions bound both.
        print(
            f"max_seq_length: sentence-transformers reads {model.max_seq_length}, the encoder "
            f"has {spec.max_seq_length} positions; both truncate at {spec.max_seq_length}"
        )
        model.max_seq_length = spec.max_seq_length
    return model


def hf_encoder(model: SentenceTransformer) -> torch.nn.Module:
    """Returns the Hugging Face model inside the sentence-transformers Transformer module."""
    for module in model:
        if hasattr(module, "auto_model"):
            return module.auto_model
    raise SystemExit("the sentence-transformers model has no Transformer module with an auto_model")
