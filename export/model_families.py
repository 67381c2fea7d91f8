"""The architecture families the export serves, and what differs between them: the transformers
class each loads as (as a bi-encoder, a reranker, a sparse encoder and a multi-vector encoder),
where its position ids start, and whether its encoder takes token type ids."""

from __future__ import annotations

import inspect
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# config.json model_type -> the transformers class sentence-transformers loads it as (AutoModel).
# Each exports through the TorchScript exporter and passes the self-check on the test families
# (harness/family_models.py); other architectures are refused rather than guessed at.
SUPPORTED_MODEL_TYPES: MappingProxyType[str, str] = MappingProxyType(
    {
        "bert": "BertModel",
        "xlm-roberta": "XLMRobertaModel",
        "mpnet": "MPNetModel",
        "modernbert": "ModernBertModel",
        "qwen3": "Qwen3Model",
    }
)
# The same for rerankers: config.json model_type -> the sequence-classification class a
# CrossEncoder loads. Only the families the reranker tests build (harness/cross_encoder_models.py).
RERANK_MODEL_TYPES: MappingProxyType[str, str] = MappingProxyType(
    {
        "bert": "BertForSequenceClassification",
        "xlm-roberta": "XLMRobertaForSequenceClassification",
    }
)
# The same for sparse encoders (SPLADE): config.json model_type -> the masked language model a
# SparseEncoder's MLMTransformer loads. BERT only: the family of the published SPLADE models and of
# the sparse test models (harness/sparse_encoder_models.py); others are refused by name.
SPARSE_MODEL_TYPES: MappingProxyType[str, str] = MappingProxyType({"bert": "BertForMaskedLM"})
# The same for multi-vector (ColBERT-style) encoders: config.json model_type -> the encoder a
# MultiVectorEncoder's Transformer loads (AutoModel, its last hidden states the token vectors).
# Only the families the multi-vector tests build (harness/multivector_models.py).
MULTIVECTOR_MODEL_TYPES: MappingProxyType[str, str] = MappingProxyType(
    {"bert": "BertModel", "modernbert": "ModernBertModel"}
)
# Where the position embeddings start after the padding id (RoBERTa-style position ids), the
# last max_position_embeddings - (pad_token_id + 1) positions are the usable ones.
PADDING_OFFSET_POSITIONS = frozenset({"xlm-roberta", "mpnet"})


def usable_positions(config: dict[str, Any]) -> int | None:
    """The encoder's usable positions (config.json's max_position_embeddings, less the padding
    offset where position ids start after the padding id), None where config.json sets none."""
    max_positions = config.get("max_position_embeddings")
    if max_positions is not None and config.get("model_type") in PADDING_OFFSET_POSITIONS:
        max_positions -= int(config.get("pad_token_id", 1)) + 1
    return max_positions


def takes_token_type_ids(encoder: torch.nn.Module) -> bool:
    """Whether the encoder takes token type ids (BERT-style): one text is all type 0."""
    return "token_type_ids" in inspect.signature(encoder.forward).parameters


def pair_token_types(model: torch.nn.Module) -> bool:
    """Whether a pair's segments reach the model as token type ids: it takes them and has more
    than one type. XLM-RoBERTa takes them but has one type, all 0, which it defaults to."""
    return takes_token_type_ids(model) and int(getattr(model.config, "type_vocab_size", 1)) > 1
