"""Reading a BGE-M3 folder into the M3Spec the M3 export works from: the XLM-RoBERTa encoder at
the folder's root (where FlagEmbedding's BGEM3FlagModel loads it), what the shared tokenizer
stage reads (max length, vocabulary, prompts), the hidden size, the two heads beside it
(colbert_linear.pt and sparse_linear.pt, torch.nn.Linear state_dicts) and the ids of the special
tokens whose sparse weights FlagEmbedding drops, refusing what the export cannot serve.

The sentence-transformers modules after the Transformer are not read: BGEM3FlagModel, which the
export serves and checks against, pools the CLS token and normalizes whatever they say."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from embedding_catalog.tasks import COLBERT_HEAD, SPARSE_HEAD
from model_folder import (
    FEATURE_EXTRACTION,
    FolderSpec,
    module_class_name,
    read_folder_spec,
    read_json,
)
from tokenizers import Tokenizer

# config.json model_type -> the encoder BGEM3FlagModel loads (AutoModel): BGE-M3's family.
M3_MODEL_TYPES: MappingProxyType[str, str] = MappingProxyType({"xlm-roberta": "XLMRobertaModel"})
# The tokenizer's special tokens whose ids FlagEmbedding leaves out of the sparse weights.
SKIPPED_TOKENS = ("cls_token", "eos_token", "pad_token", "unk_token")
# Where a folder has no modules.json (as FlagEmbedding's fine-tuning saves it): the encoder alone.
ROOT_TRANSFORMER = MappingProxyType({"type": "Transformer", "path": ""})


@dataclass(frozen=True)
class M3Spec(FolderSpec):
    """What the M3 export needs to know beyond what every folder has."""

    hidden_size: int  # the dense vector's width, and the heads' input
    colbert_dim: int  # the token vectors' width: colbert_linear's output, the hidden size
    skipped_token_ids: tuple[int, ...]  # SKIPPED_TOKENS' ids, ascending, without repeats


def read_m3_modules(model_dir: Path) -> list[dict[str, Any]]:
    """modules.json's modules, refusing a Transformer anywhere but the folder's root: that is
    where BGEM3FlagModel loads the encoder and its tokenizer from."""
    path = model_dir / "modules.json"
    if not path.exists():
        return [dict(ROOT_TRANSFORMER)]
    modules: list[dict[str, Any]] = read_json(path)
    names = [module_class_name(module) for module in modules]
    if not names or names[0] != "Transformer" or str(modules[0].get("path", "")) != "":
        raise SystemExit(
            f"{path}: a BGE-M3 folder's first module must be a Transformer at the folder's root, "
            f"where BGEM3FlagModel loads it; found {names}"
            + (f" (the first at {modules[0].get('path')!r})" if names else "")
        )
    return modules


def read_head(path: Path, in_features: int, out_features: int) -> None:
    """Refuses, naming the file, anything but a torch.nn.Linear(in_features, out_features)
    state_dict, as BGEM3FlagModel loads it."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a file it cannot read
        # Its kind only: torch's messages run over many lines, and the launcher shows the last.
        raise SystemExit(
            f"{path}: not a readable torch state_dict ({type(error).__name__})"
        ) from None
    found = {
        name: tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        for name, value in (state.items() if isinstance(state, dict) else ())
    }
    if found != {"weight": (out_features, in_features), "bias": (out_features,)}:
        raise SystemExit(
            f"{path}: expected a torch.nn.Linear({in_features}, {out_features}) state_dict "
            f"(weight [{out_features}, {in_features}], bias [{out_features}]), found "
            f"{found or type(state).__name__}"
        )


def read_skipped_token_ids(transformer_dir: Path) -> tuple[int, ...]:
    """The ids of SKIPPED_TOKENS as the tokenizer's configs name them (special_tokens_map.json
    over tokenizer_config.json, as transformers reads them), looked up in tokenizer.json."""
    names: dict[str, Any] = {}
    for file_name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = transformer_dir / file_name
        if path.exists():
            entries = read_json(path).items()
            names |= {key: value for key, value in entries if key in SKIPPED_TOKENS and value}
    vocabulary = Tokenizer.from_file(str(transformer_dir / "tokenizer.json"))
    ids = set()
    for key, value in names.items():
        token = value["content"] if isinstance(value, dict) else value
        token_id = vocabulary.token_to_id(str(token))
        if token_id is None:
            raise SystemExit(f"{transformer_dir}: its {key} {token!r} is not in tokenizer.json")
        ids.add(token_id)
    return tuple(sorted(ids))


def read_m3_spec(model_dir: Path) -> M3Spec:
    """Collects the encoder, max length, vocabulary, prompts, hidden size, the heads' widths and
    the skipped token ids from the BGE-M3 folder, refusing what the export cannot serve."""
    modules = read_m3_modules(model_dir)
    folder = read_folder_spec(model_dir, modules, M3_MODEL_TYPES, FEATURE_EXTRACTION)
    hidden_size = int(read_json(folder.transformer_dir / "config.json")["hidden_size"])
    # BGEM3FlagModel loads a ColBERT head as wide as the encoder (its colbert_dim=-1 default).
    read_head(model_dir / COLBERT_HEAD, hidden_size, hidden_size)
    read_head(model_dir / SPARSE_HEAD, hidden_size, 1)
    return M3Spec(
        **folder.shared(),
        hidden_size=hidden_size,
        colbert_dim=hidden_size,
        skipped_token_ids=read_skipped_token_ids(folder.transformer_dir),
    )
