"""The rows a multi-vector model is served on, as the export records and checks them: the record's
row settings (model_common.multivector reads them), with the expansion token and the skip-list
words resolved to ids as the loaded MultiVectorEncoder's tokenizer resolves them; each role's
prompt; and a role's texts tokenized as the tokenizer stages tokenize them (the prompt before the
text, truncated at the role's max length), which model_common.multivector makes into rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from model_common.multivector import ROLES, MultiVectorRoles
from multivector_folder import MultiVectorSpec
from tokenizers import Tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def expansion_token_id(spec: MultiVectorSpec, tokenizer: PreTrainedTokenizerBase) -> int:
    """The id query expansion fills with, as the Transformer module resolves it: the token the
    folder names, else the mask token, else the end-of-sequence token."""
    expansion = spec.query_expansion
    assert expansion is not None
    if expansion["token"] is not None:
        token_id = tokenizer.convert_tokens_to_ids(expansion["token"])
    else:
        token_id = tokenizer.mask_token_id
        if token_id is None:
            token_id = tokenizer.eos_token_id
    if token_id is None:
        raise SystemExit(
            f"{spec.model_dir}: query_expansion {expansion} has no token to expand with (the "
            "tokenizer has neither a mask nor an end-of-sequence token)"
        )
    return int(token_id)


def skiplist_ids(spec: MultiVectorSpec, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """MultiVectorMask's skip-list words as ids, resolved as it resolves them: a word the
    vocabulary does not hold as one token resolves to the unknown token's id and is dropped
    (unless it is the unknown token itself)."""
    unknown_id, unknown = tokenizer.unk_token_id, tokenizer.unk_token
    resolved = set()
    for word in spec.skiplist_words:
        token_id = tokenizer.convert_tokens_to_ids(word)
        if token_id is None or (
            unknown_id is not None and token_id == unknown_id and word != unknown
        ):
            continue
        resolved.add(int(token_id))
    return sorted(resolved)


def row_settings(spec: MultiVectorSpec, tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """The fields of the export record that model_common.multivector builds the rows from."""
    expansion = spec.query_expansion
    return {
        "max_seq_length": spec.max_seq_length,
        "query_length": spec.query_length,
        "document_length": spec.document_length,
        "query_expansion": None
        if expansion is None
        else {
            "strategy": expansion["strategy"],
            "length": expansion["length"],
            "attend": expansion["attend"],
            "token_id": expansion_token_id(spec, tokenizer),
        },
        "skiplist_ids": skiplist_ids(spec, tokenizer),
        "skiplist_tasks": list(spec.skiplist_tasks),
    }


def role_prompt(prompts: dict[str, str], role: str) -> str:
    """The text put before a text of the role, as encode_query and encode_document put it: the
    prompt named after the role, or none. MultiVectorEncoder's prompts always hold both names
    (unset ones as empty), so neither another prompt nor default_prompt_name ever applies."""
    return prompts.get(role) or ""


def served_prompts(prompts: dict[str, str]) -> dict[str, str]:
    """The prompts as MultiVectorEncoder holds them, for the record: the folder's, and each
    role's under its name (empty where the folder sets none), so that a stage picking a role's
    prompt by its name finds the one encode_query and encode_document use, never another (a
    "passage" prompt, which encode_document leaves unused)."""
    return {**prompts, **{role: role_prompt(prompts, role) for role in ROLES}}


def role_ids(
    tokenizer: Tokenizer, roles: MultiVectorRoles, prompt: str, role: str, texts: Sequence[str]
) -> list[list[int]]:
    """The served tokenizer's ids of the role's texts: the prompt before each, truncated at the
    role's max length, special tokens included."""
    truncated = Tokenizer.from_str(tokenizer.to_str())
    truncated.enable_truncation(roles.max_length(role), strategy="longest_first")
    truncated.no_padding()
    return [list(encoding.ids) for encoding in truncated.encode_batch([prompt + t for t in texts])]
