"""Checks on a request of token ids (INPUT_IDS and ATTENTION_MASK, [rows,
length] each), shared by every embedder so they refuse the same requests
with the same messages whatever runs the model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from model_common.errors import ErrorKind, error_message


@dataclass(frozen=True)
class TokenLimits:
    max_length: int  # tokens per row the model takes
    max_tokens: int  # real (attended) tokens per request
    vocab_size: int  # ids must lie in [0, vocab_size)


def token_error(
    input_ids: np.ndarray, attention_mask: np.ndarray, limits: TokenLimits
) -> str | None:
    """The error message for a request the embedder must refuse, or None."""
    if input_ids.shape != attention_mask.shape:
        return error_message(
            ErrorKind.INVALID_INPUT,
            f"INPUT_IDS {list(input_ids.shape)} and ATTENTION_MASK "
            f"{list(attention_mask.shape)} must have the same shape",
        )
    rows, length = input_ids.shape
    if rows == 0 or length == 0:
        return error_message(
            ErrorKind.INVALID_INPUT,
            "INPUT_IDS is empty: send at least one row of at least one token",
        )
    if length > limits.max_length:
        return error_message(
            ErrorKind.INPUT_TOO_LARGE,
            f"INPUT_IDS rows have {length} tokens; this model takes at most {limits.max_length}",
        )
    tokens = int(np.count_nonzero(attention_mask))
    if tokens > limits.max_tokens:
        return error_message(
            ErrorKind.INPUT_TOO_LARGE,
            f"the request has {tokens} tokens, over the limit of {limits.max_tokens} "
            "(max_tokens_per_request); split it",
        )
    # Checked before the model sees them: on a GPU an index out of range is
    # a device-side fault that ends the whole process.
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= limits.vocab_size:
        return error_message(
            ErrorKind.INVALID_INPUT,
            f"token ids must lie in [0, {limits.vocab_size}), got [{low}, {high}]",
        )
    return None


def stack_tokens(batch: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Several requests' ids and masks as one pair of arrays, each request's
    rows padded to the longest row of all (id 0, mask 0)."""
    length = max(input_ids.shape[1] for input_ids, _ in batch)

    def pad(array: np.ndarray) -> np.ndarray:
        return np.pad(array, ((0, 0), (0, length - array.shape[1])))

    return (
        np.concatenate([pad(input_ids) for input_ids, _ in batch]),
        np.concatenate([pad(attention_mask) for _, attention_mask in batch]),
    )


def pad_rows(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ids padded to the longest (id 0), and the attention mask."""
    length = max(len(row) for row in rows)
    ids = np.zeros((len(rows), length), dtype=np.int64)
    mask = np.zeros((len(rows), length), dtype=np.int64)
    for index, row in enumerate(rows):
        ids[index, : len(row)] = row
        mask[index, : len(row)] = 1
    return ids, mask
