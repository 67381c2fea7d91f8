"""Embedding bytes -> numpy arrays by reinterpretation, never per-float work.

Triton returns EMBEDDING as uint8 rows [N, B] holding each embedding's
little-endian bytes; viewing them with the row dtype gives [N, B / itemsize]
without a copy. The quantized and binary formats come back as stored: int8 or
uint8 codes, and packed bits (binary as int8, ubinary as uint8, k / 8 bytes
per row), exactly as docs/contract.md describes them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ROW_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "int8": np.dtype("i1"),
    "uint8": np.dtype("u1"),
    "binary": np.dtype("i1"),
    "ubinary": np.dtype("u1"),
}


def decode_rows(rows: np.ndarray, dtype: str) -> np.ndarray:
    """uint8 [N, B] -> [N, B / itemsize] of the row dtype, sharing memory."""
    return rows.view(ROW_DTYPES[dtype])


def assemble(parts: Sequence[np.ndarray], dtype: str) -> np.ndarray:
    """Decodes the rows of each response and joins them in order; a single
    response stays a view of the received bytes."""
    decoded = [decode_rows(part, dtype) for part in parts]
    return decoded[0] if len(decoded) == 1 else np.concatenate(decoded)
