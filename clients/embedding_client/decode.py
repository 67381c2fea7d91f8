"""Embedding bytes -> numpy arrays by reinterpretation, never per-float work.

Triton returns EMBEDDING as uint8 rows [N, B] holding each embedding's
little-endian bytes; viewing them with the row dtype gives [N, B / itemsize]
without a copy. The quantized and binary formats come back as stored: int8 or
uint8 codes, and packed bits (binary as int8, ubinary as uint8, k / 8 bytes
per row), exactly as docs/contract.md describes them. Sparse rows (a learned-sparse
encoder's SPARSE_BYTES) hold a count, indices and values each; their parts are
viewed the same way, one row at a time.

The formats come from the service's declaration (declaration.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from embedding_client.declaration import DECLARATION as _DECLARATION

ROW_DTYPES: dict[str, np.dtype] = {
    entry["name"]: np.dtype(entry["numpy"]) for entry in _DECLARATION["dtypes"]
}
# The server's default for each row option (dtype, dimensions, normalize).
OPTION_DEFAULTS: dict[str, Any] = {
    option["name"]: option["default"] for option in _DECLARATION["options"]
}
_SPARSE: dict[str, Any] = _DECLARATION["sparse"]
SPARSE_VALUE_DTYPES: dict[str, np.dtype] = {
    entry["name"]: np.dtype(entry["numpy"]) for entry in _SPARSE["value_dtypes"]
}
# The server's default for each sparse row option (dtype, max_active_dims).
SPARSE_OPTION_DEFAULTS: dict[str, Any] = {
    option["name"]: option["default"] for option in _SPARSE["options"]
}
_SPARSE_COUNT = np.dtype(_SPARSE["count"]["numpy"])
_SPARSE_INDEX = np.dtype(_SPARSE["index"]["numpy"])


def decode_rows(rows: np.ndarray, dtype: str) -> np.ndarray:
    """uint8 [N, B] -> [N, B / itemsize] of the row dtype, sharing memory."""
    return rows.view(ROW_DTYPES[dtype])


def assemble(parts: Sequence[np.ndarray], dtype: str) -> np.ndarray:
    """Decodes the rows of each response and joins them in order; a single
    response stays a view of the received bytes."""
    decoded = [decode_rows(part, dtype) for part in parts]
    return decoded[0] if len(decoded) == 1 else np.concatenate(decoded)


def decode_sparse_rows(rows: np.ndarray, dtype: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """uint8 sparse rows [N, B] -> per row (indices, values), each a view of
    the row's bytes: count n | n indices, ascending | n values of `dtype` |
    zero padding to B (docs/contract.md, "Sparse rows")."""
    count_end = _SPARSE_COUNT.itemsize
    if rows.dtype != np.uint8 or rows.ndim != 2 or (len(rows) > 0 and rows.shape[1] < count_end):
        raise ValueError(
            f"sparse rows are uint8 [N, B >= {count_end}], got {rows.dtype} {list(rows.shape)}"
        )
    value_dtype = SPARSE_VALUE_DTYPES[dtype]
    decoded = []
    for number, row in enumerate(rows):
        count = int(row[:count_end].view(_SPARSE_COUNT)[0])
        indices_end = count_end + count * _SPARSE_INDEX.itemsize
        values_end = indices_end + count * value_dtype.itemsize
        if values_end > row.size:
            raise ValueError(
                f"sparse row {number} holds {count} entries, past its {row.size} bytes"
            )
        decoded.append(
            (
                row[count_end:indices_end].view(_SPARSE_INDEX),
                row[indices_end:values_end].view(value_dtype),
            )
        )
    return decoded
