"""A multi-vector (late-interaction) encoder's call, shared by the sync and
asyncio clients: the texts checked and cut into requests of at most the
server's max batch size, and each text's token vectors that come back
decoded as views of the received bytes (docs/contract.md, "Multi-vector
rows")."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from embedding_client.batching import checked_texts, split_texts
from embedding_client.call import Call
from embedding_client.decode import ROW_DTYPES
from embedding_client.multivector_decode import decode_multivector_rows, vector_dims
from embedding_client.options import MultiVectorOptions

# The output of a multi-vector encoder's entry point (model_repository/multivector/embed_multi).
MULTIVECTOR_OUTPUT = "MULTIVECTOR"


def multivector_call(
    model: str, texts: str | Sequence[str], options: MultiVectorOptions
) -> Call[list[np.ndarray]]:
    """The call, or InvalidInputError naming what is wrong with it."""
    split = partial(split_texts, checked_texts(texts))
    return Call.of_output(
        model,
        options.parameters(),
        MULTIVECTOR_OUTPUT,
        split,
        partial(multivector_rows, options.dtype),
    )


def multivector_rows(dtype: str, parts: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each text's vectors, in order, from each request's answer."""
    vectors: list[np.ndarray] = []
    for part in parts:
        dims = vector_dims(part, dtype)
        if dims is None:
            # No text of the request has a vector, so its answer tells no width.
            vectors.extend(np.empty((0, 0), ROW_DTYPES[dtype]) for _ in part)
        else:
            vectors.extend(decode_multivector_rows(part, dtype, dims))
    return vectors
