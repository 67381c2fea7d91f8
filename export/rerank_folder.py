"""Reading a sentence-transformers CrossEncoder folder into the RerankSpec the reranker's export
works from: modules.json (one Transformer module, sequence classification), the classifier's
config.json (architecture, labels, vocabularies), the max length, the activation and the prompts
the folder names, refusing what the export cannot serve."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from model_families import RERANK_MODEL_TYPES
from model_folder import (
    ST_CONFIG,
    module_class_name,
    read_json,
    read_max_seq_length,
    read_model_type,
    read_prompts,
    read_transformer_config,
)

Activation = Literal["sigmoid", "identity"]
# config_sentence_transformers.json's activation_fn (the class path CrossEncoder.save writes) ->
# what the graph applies to the logit.
ACTIVATIONS: MappingProxyType[str, Activation] = MappingProxyType(
    {
        "torch.nn.modules.activation.Sigmoid": "sigmoid",
        "torch.nn.modules.linear.Identity": "identity",
    }
)
# CrossEncoder's own default for a one-label model, where the folder names none.
DEFAULT_ACTIVATION = "torch.nn.modules.activation.Sigmoid"
SEQUENCE_CLASSIFICATION = "sequence-classification"


@dataclass(frozen=True)
class RerankSpec:
    """What the reranker's export needs to know about the CrossEncoder folder."""

    model_dir: Path
    transformer_dir: Path  # the Transformer module's folder: config.json, tokenizer.json
    model_type: str  # config.json's
    architecture: str  # the transformers class CrossEncoder loads (RERANK_MODEL_TYPES)
    modules: tuple[str, ...]  # modules.json's class names
    max_seq_length: int
    vocab_size: int
    type_vocab_size: int
    num_labels: int
    activation: Activation
    activation_fn: str  # the class path the activation was read as
    # config_sentence_transformers.json's: name -> text put before the query, as
    # CrossEncoder.predict(prompt_name=...) puts it.
    prompts: dict[str, str]
    default_prompt_name: str | None


def read_rerank_modules(model_dir: Path) -> list[dict[str, Any]]:
    """Reads modules.json, refusing anything but the one Transformer module a sequence
    classifier is saved as (a LogitScore or Dense head is not computed by the graph)."""
    modules_path = model_dir / "modules.json"
    modules: list[dict[str, Any]] = read_json(modules_path)
    names = [module_class_name(module) for module in modules]
    if names != ["Transformer"]:
        raise SystemExit(
            f"{modules_path}: a reranker with modules {names}; only one Transformer module "
            "(sequence classification) can be exported"
        )
    return modules


def read_num_labels(config_path: Path, config: dict[str, Any]) -> int:
    """The classifier's label count as transformers reads config.json (id2label, else
    num_labels, else 2), refusing all but one label: the graph serves one score per pair."""
    labels = config.get("id2label")
    num_labels = len(labels) if isinstance(labels, dict) else int(config.get("num_labels", 2))
    if num_labels != 1:
        raise SystemExit(
            f"{config_path}: the classifier has {num_labels} labels; only one-label rerankers "
            "(num_labels 1, one score per pair) can be exported"
        )
    return num_labels


def read_activation(model_dir: Path) -> str:
    """config_sentence_transformers.json's activation_fn, refusing those the graph does not
    compute by name."""
    path = model_dir / ST_CONFIG
    activation_fn = read_json(path).get("activation_fn") or DEFAULT_ACTIVATION
    if activation_fn not in ACTIVATIONS:
        raise SystemExit(
            f"{path}: unsupported activation_fn {activation_fn!r}; only "
            f"{' or '.join(ACTIVATIONS)} can be exported"
        )
    return str(activation_fn)


def read_rerank_spec(model_dir: Path) -> RerankSpec:
    """Collects architecture, labels, max length, activation and prompts from the CrossEncoder
    folder's configs, refusing what the export cannot serve."""
    modules = read_rerank_modules(model_dir)
    transformer_dir = model_dir / str(modules[0].get("path", ""))
    model_type = read_model_type(transformer_dir, RERANK_MODEL_TYPES)
    config_path = transformer_dir / "config.json"
    config = read_json(config_path)
    num_labels = read_num_labels(config_path, config)
    activation_fn = read_activation(model_dir)
    prompts, default_prompt_name = read_prompts(model_dir)
    st_config = read_transformer_config(transformer_dir, SEQUENCE_CLASSIFICATION)
    return RerankSpec(
        model_dir=model_dir,
        transformer_dir=transformer_dir,
        model_type=model_type,
        architecture=RERANK_MODEL_TYPES[model_type],
        modules=("Transformer",),
        max_seq_length=read_max_seq_length(transformer_dir, st_config),
        vocab_size=int(config["vocab_size"]),
        type_vocab_size=int(config.get("type_vocab_size", 1)),
        num_labels=num_labels,
        activation=ACTIVATIONS[activation_fn],
        activation_fn=activation_fn,
        prompts=prompts,
        default_prompt_name=default_prompt_name,
    )
