"""A reference encoder of sparse rows in plain Python (struct, sorted), written
from docs/contract.md's "Sparse rows" rather than from the serializer, so that
the tests compare the two implementations byte for byte."""

from __future__ import annotations

import struct

import numpy as np

_VALUE_FORMATS = {"float32": "<f", "float16": "<e"}


def reference_entries(
    activations: np.ndarray, max_active_dims: int | None = None
) -> list[tuple[list[int], list[float]]]:
    """Per row of float32 [N, V]: the indices of the entries above 0 (with
    max_active_dims k, the k largest, ties to the lower index), ascending,
    and their values."""
    entries = []
    for row in activations.astype(np.float32).tolist():
        active = [index for index, value in enumerate(row) if value > 0]
        if max_active_dims is not None:
            active = sorted(active, key=lambda index: (-row[index], index))[:max_active_dims]
        indices = sorted(active)
        entries.append((indices, [row[index] for index in indices]))
    return entries


def reference_sparse_rows(
    activations: np.ndarray, dtype: str = "float32", max_active_dims: int | None = None
) -> np.ndarray:
    """The uint8 [N, B] rows the serializer writes for `activations`."""
    value_format = _VALUE_FORMATS[dtype]
    rows = [
        struct.pack("<I", len(indices))
        + b"".join(struct.pack("<I", index) for index in indices)
        + b"".join(struct.pack(value_format, value) for value in values)
        for indices, values in reference_entries(activations, max_active_dims)
    ]
    width = max((len(row) for row in rows), default=0)
    padded = b"".join(row.ljust(width, b"\0") for row in rows)
    return np.frombuffer(padded, np.uint8).reshape(len(rows), width)
