"""Multi-vector rows -> one [n, D] numpy array per text, by reinterpretation,
never per-float work.

A late-interaction (ColBERT-style) model's serializer answers each request
with MULTIVECTOR_BYTES, uint8 rows [N, B], one per text: count n | the n
vectors the text's mask serves, in position order, each a dense row of the
request's dtype | zero padding to B, the response's widest row
(docs/contract.md, "Multi-vector rows"). Each text's vectors come back as a
view of its row's bytes: [n, D] float32, float16, int8 or uint8 codes, or
[n, D / 8] packed bytes for binary (int8) and ubinary (uint8), exactly as a
dense row of that dtype decodes.

The layout comes from the service's declaration (declaration.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embedding_client.declaration import DECLARATION as _DECLARATION
from embedding_client.decode import ROW_DTYPES

_MULTIVECTOR: dict[str, Any] = _DECLARATION["multivector"]
_COUNT = np.dtype(_MULTIVECTOR["count"]["numpy"])
# The dtypes that pack 8 dimensions per byte.
BIT_PACKED = frozenset(
    entry["name"] for entry in _DECLARATION["dtypes"] if entry.get("bit_packed", False)
)


def vector_width(dtype: str, dims: int) -> int:
    """The values one vector of `dims` dimensions holds in `dtype`: `dims`,
    or dims / 8 packed bytes for a bit-packed dtype; ValueError for an
    unknown dtype or a width the dtype cannot hold."""
    if dtype not in ROW_DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (expected one of {', '.join(ROW_DTYPES)})")
    if dims < 1:
        raise ValueError(f"vectors have at least 1 dimension, got {dims}")
    if dtype in BIT_PACKED:
        if dims % 8 != 0:
            raise ValueError(f"{dtype} packs 8 dimensions per byte, got {dims} dimensions")
        return dims // 8
    return dims


def vector_dims(rows: np.ndarray, dtype: str) -> int | None:
    """The vector width D of a response's rows: its widest row has no
    padding, so a vector's bytes are (B - the count's) / its count; None where
    no row holds a vector."""
    counts = [int(row[: _COUNT.itemsize].view(_COUNT)[0]) for row in rows]
    most = max(counts, default=0)
    if most == 0:
        return None
    vector_bytes, rest = divmod(rows.shape[1] - _COUNT.itemsize, most)
    values, partial = divmod(vector_bytes, ROW_DTYPES[dtype].itemsize)
    if rest or partial:
        raise ValueError(
            f"multi-vector rows of {rows.shape[1]} bytes cannot hold {most} whole vectors "
            f"of {dtype}"
        )
    return values * 8 if dtype in BIT_PACKED else values


def decode_multivector_rows(rows: np.ndarray, dtype: str, dims: int) -> list[np.ndarray]:
    """uint8 multi-vector rows [N, B] -> per row its vectors, [n, D] of the
    dtype ([n, D / 8] packed bytes when bit-packed), each a view of the row's
    bytes; `dims` is the model's vector width D. ValueError for rows that are
    not uint8 [N, B] or whose count runs past B."""
    width = vector_width(dtype, dims)
    count_end = _COUNT.itemsize
    if rows.dtype != np.uint8 or rows.ndim != 2 or (len(rows) > 0 and rows.shape[1] < count_end):
        raise ValueError(
            f"multi-vector rows are uint8 [N, B >= {count_end}], "
            f"got {rows.dtype} {list(rows.shape)}"
        )
    value_dtype = ROW_DTYPES[dtype]
    vector_bytes = width * value_dtype.itemsize
    decoded = []
    for number, row in enumerate(rows):
        count = int(row[:count_end].view(_COUNT)[0])
        end = count_end + count * vector_bytes
        if end > row.size:
            raise ValueError(
                f"multi-vector row {number} holds {count} vectors of {vector_bytes} bytes, "
                f"past its {row.size} bytes"
            )
        # A contiguous slice viewed and reshaped stays a view of the row.
        decoded.append(row[count_end:end].view(value_dtype).reshape(count, width))
    return decoded
