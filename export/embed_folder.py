"""Reading a bi-encoder's folder (a sentence-transformers SentenceTransformer) into the EmbedSpec
the export works from: what every folder has (model_folder.py), then modules.json (Transformer,
Pooling, then any Dense and Normalize modules), the Pooling and head modules' configs, refusing
what the export cannot serve."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from model_families import SUPPORTED_MODEL_TYPES
from model_folder import (
    FEATURE_EXTRACTION,
    FolderSpec,
    module_class_name,
    read_folder_spec,
    read_json,
)

PoolingMode = Literal["mean", "cls", "lasttoken"]

# Both the legacy boolean keys and the newer single `pooling_mode` values are accepted.
SUPPORTED_POOLING: MappingProxyType[str, PoolingMode] = MappingProxyType(
    {
        "pooling_mode_mean_tokens": "mean",
        "pooling_mode_cls_token": "cls",
        "pooling_mode_lasttoken": "lasttoken",
        "mean": "mean",
        "cls": "cls",
        "lasttoken": "lasttoken",
    }
)
SUPPORTED_MODULES = frozenset({"Transformer", "Pooling", "Dense", "Normalize"})
# The modules that may follow Pooling, applied in the graph in modules.json's order.
HEAD_MODULES = frozenset({"Dense", "Normalize"})
SENTENCE_EMBEDDING = "sentence_embedding"


@dataclass(frozen=True)
class EmbedSpec(FolderSpec):
    """What the bi-encoder's export needs to know beyond what every folder has."""

    pooling: PoolingMode
    has_normalize: bool  # the last module is Normalize: encode() hides the final vector's norm


def read_modules(model_dir: Path) -> list[dict[str, Any]]:
    """Reads modules.json and rejects modules, or orders of them, the exported graph would not
    reproduce: Transformer, Pooling, then any Dense and Normalize modules."""
    modules_path = model_dir / "modules.json"
    modules: list[dict[str, Any]] = read_json(modules_path)
    unsupported = [
        module["type"] for module in modules if module_class_name(module) not in SUPPORTED_MODULES
    ]
    if unsupported:
        raise SystemExit(
            f"{modules_path}: unsupported sentence-transformers modules {unsupported}; "
            f"only {sorted(SUPPORTED_MODULES)} can be exported"
        )
    names = [module_class_name(module) for module in modules]
    if names[:2] != ["Transformer", "Pooling"] or not set(names[2:]) <= HEAD_MODULES:
        raise SystemExit(
            f"{modules_path}: unsupported module order {names}; the export computes Transformer, "
            "then Pooling, then any Dense and Normalize modules"
        )
    return modules


def active_pooling_modes(config: dict[str, Any]) -> list[str]:
    """Lists the pooling modes a Pooling config enables, in either config format."""
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        return [mode] if isinstance(mode, str) else list(mode)
    return [
        key
        for key, enabled in config.items()
        if key.startswith("pooling_mode_") and enabled is True
    ]


def read_pooling(model_dir: Path, modules: list[dict[str, Any]]) -> PoolingMode:
    """Returns the pooling mode configured in the model's Pooling module."""
    pooling_modules = [module for module in modules if module_class_name(module) == "Pooling"]
    if len(pooling_modules) != 1:
        raise SystemExit(
            f"{model_dir / 'modules.json'}: expected one Pooling module, found {len(pooling_modules)}"
        )
    config_path = model_dir / pooling_modules[0]["path"] / "config.json"
    config = read_json(config_path)
    modes = active_pooling_modes(config)
    if len(modes) != 1 or modes[0] not in SUPPORTED_POOLING:
        raise SystemExit(
            f"{config_path}: unsupported pooling mode {modes or 'none enabled'}; only mean "
            "pooling (pooling_mode_mean_tokens), CLS pooling (pooling_mode_cls_token) or "
            "last-token pooling (pooling_mode_lasttoken) can be exported"
        )
    if config.get("include_prompt", True) is not True:
        # The tokenizer stage sends the prompt's tokens like any others: pooling cannot tell
        # them apart.
        raise SystemExit(
            f"{config_path}: include_prompt is {config['include_prompt']!r}; pooling that leaves "
            "the prompt's tokens out (INSTRUCTOR-style) cannot be exported"
        )
    return SUPPORTED_POOLING[modes[0]]


def check_head_modules(model_dir: Path, modules: list[dict[str, Any]]) -> None:
    """Rejects Dense and Normalize configs that would read or write anything but the pooled
    sentence embedding, and Dense activations sentence-transformers loads only with remote
    code (without it, it falls back to Tanh, which the model's author did not train)."""
    for module in modules[2:]:
        config_path = model_dir / module["path"] / "config.json"
        config = read_json(config_path) if config_path.exists() else {}
        names = {config.get(key) for key in ("module_input_name", "module_output_name")}
        if not names <= {None, SENTENCE_EMBEDDING}:
            raise SystemExit(
                f"{config_path}: {module_class_name(module)} reads or writes "
                f"{sorted(str(name) for name in names - {None})}; only the pooled "
                f"{SENTENCE_EMBEDDING} can be exported"
            )
        activation = config.get("activation_function")
        if activation is not None and not str(activation).startswith("torch."):
            raise SystemExit(
                f"{config_path}: Dense activation {activation!r} is not a torch module; "
                "sentence-transformers would replace it with Tanh without trust_remote_code"
            )


def read_embed_spec(model_dir: Path) -> EmbedSpec:
    """Collects architecture, pooling, sequence length, normalization and prompts from the
    model's config files, refusing what the export cannot serve."""
    modules = read_modules(model_dir)
    folder = read_folder_spec(model_dir, modules, SUPPORTED_MODEL_TYPES, FEATURE_EXTRACTION)
    pooling = read_pooling(model_dir, modules)
    check_head_modules(model_dir, modules)
    return EmbedSpec(
        **folder.shared(), pooling=pooling, has_normalize=folder.modules[-1] == "Normalize"
    )
