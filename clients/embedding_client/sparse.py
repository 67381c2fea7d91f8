"""A sparse encoder's call, shared by the sync and asyncio clients: the texts
checked and cut into requests of at most the server's max batch size, and
the sparse rows that come back decoded as views of the received bytes
(docs/contract.md, "Sparse rows")."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

import numpy as np

from embedding_client.batching import checked_texts, split_texts
from embedding_client.call import Call
from embedding_client.decode import decode_sparse_rows
from embedding_client.options import SparseOptions

# The output of a sparse encoder's entry point (model_repository/sparse/embed_sparse).
SPARSE_OUTPUT = "SPARSE"


class SparseRow(NamedTuple):
    """One text's active vocabulary entries."""

    indices: np.ndarray  # uint32, ascending
    values: np.ndarray  # float32, or float16 with dtype="float16"


def sparse_call(
    model: str, texts: str | Sequence[str], options: SparseOptions
) -> Call[list[SparseRow]]:
    """The call, or InvalidInputError naming what is wrong with it."""
    split = partial(split_texts, checked_texts(texts))
    rows = partial(sparse_rows, options.dtype)
    return Call.of_output(model, options.parameters(), SPARSE_OUTPUT, split, rows)


def sparse_rows(dtype: str, parts: Sequence[np.ndarray]) -> list[SparseRow]:
    """Each text's row, in order, from each request's answer."""
    return [
        SparseRow(indices, values)
        for part in parts
        for indices, values in decode_sparse_rows(part, dtype)
    ]
