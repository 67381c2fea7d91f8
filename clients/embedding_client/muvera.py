"""A multi-vector encoder's MUVERA call (NAME_muvera), shared by the sync and asyncio clients:
the texts checked and cut into requests of at most the server's max batch size, and each
text's one-vector row that comes back decoded and stacked, [N, F] (docs/contract.md,
"MUVERA encodings")."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from embedding_client.batching import checked_texts, split_texts
from embedding_client.call import Call
from embedding_client.multivector import MULTIVECTOR_OUTPUT
from embedding_client.multivector_decode import decode_multivector_rows, vector_dims
from embedding_client.options import MuveraOptions

# The entry point's suffix after the catalog name.
MUVERA_SUFFIX = "_muvera"


def muvera_call(model: str, texts: str | Sequence[str], options: MuveraOptions) -> Call[np.ndarray]:
    """The call of `model`'s MUVERA entry point (`model` is the catalog name), or
    InvalidInputError naming what is wrong with it."""
    split = partial(split_texts, checked_texts(texts))
    return Call.of_output(
        model + MUVERA_SUFFIX,
        options.parameters(),
        MULTIVECTOR_OUTPUT,
        split,
        partial(_encodings, options.dtype),
    )


def _encodings(dtype: str, parts: Sequence[np.ndarray]) -> np.ndarray:
    """[N, F] of the dtype ([N, F / 8] packed bytes for binary): each text's one vector."""
    rows = []
    for part in parts:
        dims = vector_dims(part, dtype)
        # Every row holds one vector: the server writes a count of 1 for each text.
        if dims is None:
            raise ValueError("a MUVERA answer holds no vector")
        rows.extend(decode_multivector_rows(part, dtype, dims))
    if any(len(row) != 1 for row in rows):
        raise ValueError(f"a MUVERA row holds one vector, got {[len(row) for row in rows]}")
    return np.concatenate(rows)
