"""Reading a sentence-transformers SparseEncoder folder (SPLADE) into the SparseSpec the sparse
encoder's export works from: modules.json (an MLMTransformer, then SpladePooling), the masked
language model's config.json (architecture, vocabulary), SpladePooling's config (pooling strategy,
activation), the max length, the prompts and the model's default max_active_dims, refusing what
the export cannot serve."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from model_families import SPARSE_MODEL_TYPES
from model_folder import (
    FEATURE_EXTRACTION,
    ST_CONFIG,
    FolderSpec,
    module_class_name,
    read_folder_spec,
    read_json,
)

PoolingStrategy = Literal["max", "sum"]
POOLING_STRATEGIES: tuple[PoolingStrategy, ...] = ("max", "sum")
# log(1 + relu(logit)), as every SPLADE model but OpenSearch's log1p_relu (a second log1p).
ACTIVATION = "relu"
FILL_MASK = "fill-mask"
# modules.json's first module: the legacy MLMTransformer, or the Transformer that replaced it
# (sentence-transformers 5.4+), which must then say it runs fill-mask.
MLM_MODULES = frozenset({"MLMTransformer", "Transformer"})
# SpladePooling's config keys: the library's, its older name for the width, and chunk_size,
# which only splits the sequence into chunks pooled one after another (max of maxima, sum of
# sums): the same result, up to float rounding in a sum, which the check measures.
SPLADE_KEYS = frozenset(
    {
        "pooling_strategy",
        "activation_function",
        "embedding_dimension",
        "word_embedding_dimension",
        "chunk_size",
    }
)
# SpladePooling's defaults, where its config leaves a key out.
DEFAULT_POOLING = MappingProxyType({"pooling_strategy": "max", "activation_function": ACTIVATION})


@dataclass(frozen=True)
class SparseSpec(FolderSpec):
    """What the sparse encoder's export needs to know beyond what every folder has (its
    vocab_size is also the activations' width, word_embedding_dimension)."""

    pooling_strategy: PoolingStrategy
    activation_function: str
    max_active_dims: int | None  # config_sentence_transformers.json's, else None (all kept)


def read_sparse_modules(model_dir: Path) -> list[dict[str, Any]]:
    """Reads modules.json, refusing anything but an MLMTransformer then SpladePooling: an
    inference-free SPLADE (SparseStaticEmbedding, a Router), a SparseAutoEncoder or any other
    module is not computed by the graph."""
    modules_path = model_dir / "modules.json"
    modules: list[dict[str, Any]] = read_json(modules_path)
    names = [module_class_name(module) for module in modules]
    if len(names) != 2 or names[0] not in MLM_MODULES or names[1] != "SpladePooling":
        raise SystemExit(
            f"{modules_path}: model_type 'SparseEncoder' with modules {names}; only an "
            "MLMTransformer (or a fill-mask Transformer) then SpladePooling can be exported"
        )
    return modules


def read_splade_pooling(config_path: Path, vocab_size: int) -> tuple[PoolingStrategy, str]:
    """SpladePooling's pooling strategy and activation, refusing what the graph does not compute
    by name: an activation but relu, a key it does not know, a width other than the MLM's."""
    config: dict[str, Any] = read_json(config_path)
    unknown = sorted(set(config) - SPLADE_KEYS)
    if unknown:
        raise SystemExit(
            f"{config_path}: unsupported SpladePooling settings {unknown}; only "
            f"{sorted(SPLADE_KEYS)} can be exported"
        )
    config = {**DEFAULT_POOLING, **config}
    strategy, activation = config["pooling_strategy"], config["activation_function"]
    if strategy not in POOLING_STRATEGIES:
        raise SystemExit(
            f"{config_path}: unsupported pooling_strategy {strategy!r}; only max or sum"
        )
    if activation != ACTIVATION:
        raise SystemExit(
            f"{config_path}: unsupported activation_function {activation!r}; only relu "
            "(log(1 + relu(logits))) can be exported"
        )
    width = config.get("embedding_dimension", config.get("word_embedding_dimension"))
    if width is not None and int(width) != vocab_size:
        raise SystemExit(
            f"{config_path}: embedding_dimension {width} is not the MLM's vocabulary size "
            f"{vocab_size}"
        )
    return strategy, str(activation)


def read_max_active_dims(model_dir: Path) -> int | None:
    """config_sentence_transformers.json's max_active_dims: how many of a row's largest values
    SparseEncoder.encode keeps by default (None: all)."""
    path = model_dir / ST_CONFIG
    value = read_json(path).get("max_active_dims")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise SystemExit(f"{path}: max_active_dims must be a positive integer, found {value!r}")
    return value


def read_sparse_spec(model_dir: Path) -> SparseSpec:
    """Collects architecture, pooling, activation, max length, prompts and max_active_dims from
    the SparseEncoder folder's configs, refusing what the export cannot serve."""
    modules = read_sparse_modules(model_dir)
    # An MLMTransformer runs fill-mask unless its config says otherwise; a Transformer, the
    # feature extraction of a config naming no task, must say so.
    legacy = module_class_name(modules[0]) == "MLMTransformer"
    absent_task = FILL_MASK if legacy else FEATURE_EXTRACTION
    folder = read_folder_spec(model_dir, modules, SPARSE_MODEL_TYPES, FILL_MASK, absent_task)
    strategy, activation = read_splade_pooling(
        model_dir / str(modules[1]["path"]) / "config.json", folder.vocab_size
    )
    return SparseSpec(
        **folder.shared(),
        pooling_strategy=strategy,
        activation_function=activation,
        max_active_dims=read_max_active_dims(model_dir),
    )
