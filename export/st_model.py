"""Loading the sentence-transformers model the graph is traced from and checked against (a
SentenceTransformer, a CrossEncoder for a reranker or a SparseEncoder for a sparse encoder): on
CPU, in float32, offline, and the very model its folder's spec describes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from model_families import RERANK_MODEL_TYPES, SUPPORTED_MODEL_TYPES
from model_folder import ModelSpec
from rerank_folder import RerankSpec
from sparse_folder import SparseSpec

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder, SentenceTransformer, SparseEncoder


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


def load_checked_cross_encoder(spec: RerankSpec) -> CrossEncoder:
    """Loads the CrossEncoder on CPU, in float32, offline, and makes sure it is the one the spec
    describes: the classifier's class and labels, the activation predict() applies and the max
    length it truncates pairs at."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sentence_transformers import CrossEncoder
    from sentence_transformers.util import fullname

    model = CrossEncoder(str(spec.model_dir), device="cpu", model_kwargs={"dtype": torch.float32})
    classifier = hf_encoder(model)
    expected = RERANK_MODEL_TYPES[spec.model_type]
    if type(classifier).__name__ != expected or model.num_labels != spec.num_labels:
        raise SystemExit(
            f"{spec.model_dir}: model_type {spec.model_type!r} loaded as "
            f"{type(classifier).__name__} with {model.num_labels} labels, expected transformers' "
            f"{expected} with {spec.num_labels}"
        )
    # Older folders name it in config.json too (sbert_ce_default_activation_function): the
    # function predict() applies must be the one the graph computes.
    loaded = fullname(model.activation_fn)
    if loaded != spec.activation_fn:
        raise SystemExit(
            f"{spec.model_dir}: CrossEncoder applies {loaded}, the folder names "
            f"{spec.activation_fn}"
        )
    if model.max_seq_length != spec.max_seq_length:
        print(
            f"max_seq_length: sentence-transformers reads {model.max_seq_length}, the encoder "
            f"has {spec.max_seq_length} positions; both truncate at {spec.max_seq_length}"
        )
        model.max_seq_length = spec.max_seq_length
    return model


def load_checked_sparse_encoder(spec: SparseSpec) -> SparseEncoder:
    """Loads the SparseEncoder on CPU, in float32, offline, and makes sure it is the one the spec
    describes: the masked language model's class, SpladePooling's strategy and activation, and
    the max length it truncates at. Its default max_active_dims is lifted: the graph returns
    every activation, and the check compares them all (the record carries the default)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sentence_transformers import SparseEncoder

    model = SparseEncoder(str(spec.model_dir), device="cpu", model_kwargs={"dtype": torch.float32})
    mlm = hf_encoder(model)
    pooling = model[1]
    loaded = (type(mlm).__name__, pooling.pooling_strategy, pooling.activation_function)
    expected = (spec.architecture, spec.pooling_strategy, spec.activation_function)
    if loaded != expected:
        raise SystemExit(
            f"{spec.model_dir}: loaded as (class, pooling, activation) {loaded}, the folder "
            f"says {expected}"
        )
    if model.max_seq_length != spec.max_seq_length:
        print(
            f"max_seq_length: sentence-transformers reads {model.max_seq_length}, the encoder "
            f"has {spec.max_seq_length} positions; both truncate at {spec.max_seq_length}"
        )
        model.max_seq_length = spec.max_seq_length
    model.max_active_dims = None
    return model


def hf_encoder(model: SentenceTransformer | CrossEncoder | SparseEncoder) -> torch.nn.Module:
    """Returns the Hugging Face model inside the sentence-transformers Transformer module (a
    CrossEncoder's: the sequence classifier; a SparseEncoder's: the masked language model)."""
    for module in model:
        if hasattr(module, "auto_model"):
            return module.auto_model
    raise SystemExit("the sentence-transformers model has no Transformer module with an auto_model")
