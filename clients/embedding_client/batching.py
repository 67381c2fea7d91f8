"""Inputs checked and split into requests of at most the server's max batch
size; token rows are padded per request to that request's longest row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from embedding_client.errors import InvalidInputError


class Tensor(NamedTuple):
    name: str
    data: np.ndarray
    datatype: str


Request = list[Tensor]


def checked_texts(texts: str | Sequence[str], name: str = "texts") -> list[str]:
    """A single string is one text; `name` is the argument's, for messages."""
    items = [texts] if isinstance(texts, str) else list(texts)
    if not items:
        raise InvalidInputError(f"{name} is empty: send at least one text")
    for index, text in enumerate(items):
        if not isinstance(text, str):
            raise InvalidInputError(f"{name}[{index}] is {type(text).__name__}, not str")
    return items


def checked_token_rows(rows: Sequence[Sequence[int]]) -> list[Sequence[int]]:
    items = list(rows)
    if not items:
        raise InvalidInputError("token rows are empty: send at least one row")
    for index, row in enumerate(items):
        if len(row) == 0:
            raise InvalidInputError(f"token row {index} is empty")
    return items


def checked_token_arrays(
    input_ids: object, attention_mask: object
) -> tuple[np.ndarray, np.ndarray]:
    ids = np.asarray(input_ids, dtype=np.int64)
    mask = np.asarray(attention_mask, dtype=np.int64)
    if ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise InvalidInputError(
            f"input_ids must be a non-empty [N, L] array, got shape {ids.shape}"
        )
    if mask.shape != ids.shape:
        raise InvalidInputError(
            f"attention_mask has shape {mask.shape}, input_ids {ids.shape}: they must match"
        )
    return ids, mask


def spans(count: int, limit: int) -> list[slice]:
    """Slices of at most `limit` items covering `count`."""
    return [slice(start, start + limit) for start in range(0, count, limit)]


def text_request(texts: Sequence[str]) -> Request:
    """One request of `embed`: TEXT, the UTF-8 bytes of one text per row."""
    batch = np.array([[text.encode("utf-8")] for text in texts], dtype=np.object_)
    return [Tensor("TEXT", batch, "BYTES")]


def split_texts(texts: Sequence[str], limit: int) -> list[Request]:
    return [text_request(texts[span]) for span in spans(len(texts), limit)]


def token_request(input_ids: np.ndarray, attention_mask: np.ndarray) -> Request:
    """One request of `embed_tokens`: INT64 ids and mask, [N, L]."""
    return [
        Tensor("INPUT_IDS", input_ids, "INT64"),
        Tensor("ATTENTION_MASK", attention_mask, "INT64"),
    ]


def split_token_arrays(
    input_ids: np.ndarray, attention_mask: np.ndarray, limit: int
) -> list[Request]:
    return [
        token_request(input_ids[span], attention_mask[span])
        for span in spans(len(input_ids), limit)
    ]


def pad_rows(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Pads with id 0 and mask 0 to the longest row."""
    width = max(len(row) for row in rows)
    input_ids = np.zeros((len(rows), width), dtype=np.int64)
    attention_mask = np.zeros((len(rows), width), dtype=np.int64)
    for index, row in enumerate(rows):
        input_ids[index, : len(row)] = row
        attention_mask[index, : len(row)] = 1
    return input_ids, attention_mask


def split_token_rows(rows: Sequence[Sequence[int]], limit: int) -> list[Request]:
    return [token_request(*pad_rows(rows[span])) for span in spans(len(rows), limit)]
