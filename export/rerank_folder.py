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
from model_folder import ST_CONFIG, FolderSpec, module_class_name, read_folder_spec, read_json

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
class RerankSpec(FolderSpec):
    """What the reranker's export needs to know beyond what every folder has (its prompts go
    before the query, as CrossEncoder.predict(prompt_name=...) puts them)."""

    type_vocab_size: int
    num_labels: int
    activation: Activation
    activation_fn: str  # the class path the activation was read as


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
    folder = read_folder_spec(model_dir, modules, RERANK_MODEL_TYPES, SEQUENCE_CLASSIFICATION)
    config_path = folder.transformer_dir / "config.json"
    config = read_json(config_path)
    activation_fn = read_activation(model_dir)
    return RerankSpec(
        **folder.shared(),
        type_vocab_size=int(config.get("type_vocab_size", 1)),
        num_labels=read_num_labels(config_path, config),
        activation=ACTIVATIONS[activation_fn],
        activation_fn=activation_fn,
    )
