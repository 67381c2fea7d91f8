"""decode_multivector_rows against multi-vector rows built here from known
vectors, as docs/contract.md's "Multi-vector rows" lays them out, without a
server: each text's vectors come back as a view of the received bytes, in
every dtype, with ragged counts and padding, and a malformed buffer is
refused with a ValueError."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from embedding_client.decode import ROW_DTYPES
from embedding_client.multivector_decode import decode_multivector_rows, vector_width
from model_common.options import multivector_option_error

DIMS = 16
# Four texts of six positions; the mask serves 3, 0, 6 and 1 of them.
MASK = np.array(
    [[1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 1, 0, 0, 0]],
    dtype=np.int64,
)
VECTORS = np.random.default_rng(7).uniform(-1.0, 1.0, (*MASK.shape, DIMS)).astype(np.float32)


def _dense(vectors: np.ndarray, dtype: str) -> np.ndarray:
    """Float32 vectors [n, D] as the dense rows of `dtype` decode them
    (docs/contract.md, "Row formats")."""
    if dtype in ("float32", "float16"):
        return vectors.astype(ROW_DTYPES[dtype])
    codes = np.clip(np.rint(vectors * 127), -127, 127)
    if dtype == "int8":
        return codes.astype(np.int8)
    if dtype == "uint8":
        return (codes + 128).astype(np.uint8)
    packed = np.packbits(vectors > 0, axis=-1)
    return packed if dtype == "ubinary" else (packed ^ 0x80).view(np.int8)


def _rows(vectors: np.ndarray, mask: np.ndarray, dtype: str) -> np.ndarray:
    """The uint8 [N, B] rows the serializer writes: count | the masked
    vectors' bytes | zeros up to the widest row."""
    rows = [
        struct.pack("<I", int(np.count_nonzero(text_mask)))
        + _dense(text_vectors[text_mask != 0], dtype).tobytes()
        for text_vectors, text_mask in zip(vectors, mask, strict=True)
    ]
    width = max((len(row) for row in rows), default=0)
    padded = b"".join(row.ljust(width, b"\0") for row in rows)
    return np.frombuffer(padded, np.uint8).reshape(len(rows), width)


@pytest.mark.parametrize("dtype", list(ROW_DTYPES))
def test_round_trips_every_dtype_as_views(dtype: str) -> None:
    rows = _rows(VECTORS, MASK, dtype)
    decoded = decode_multivector_rows(rows, dtype, DIMS)
    assert len(decoded) == len(MASK)
    for vectors, text_vectors, text_mask in zip(decoded, VECTORS, MASK, strict=True):
        expected = _dense(text_vectors[text_mask != 0], dtype)
        assert vectors.dtype == ROW_DTYPES[dtype]
        assert vectors.shape == (np.count_nonzero(text_mask), vector_width(dtype, DIMS))
        np.testing.assert_array_equal(vectors, expected)
        # Views of the received bytes, not copies (an empty array shares none).
        assert vectors.size == 0 or np.shares_memory(vectors, rows)


def test_packed_dtypes_give_a_byte_per_eight_dimensions() -> None:
    assert [vector_width(dtype, DIMS) for dtype in ROW_DTYPES] == [16, 16, 16, 16, 2, 2]
    decoded = decode_multivector_rows(_rows(VECTORS, MASK, "ubinary"), "ubinary", DIMS)
    assert [vectors.shape for vectors in decoded] == [(3, 2), (0, 2), (6, 2), (1, 2)]
    unpacked = np.unpackbits(decoded[3], axis=-1)
    np.testing.assert_array_equal(unpacked[0], VECTORS[3, 2] > 0)


def test_pads_every_row_to_the_widest_and_ignores_the_padding() -> None:
    rows = _rows(VECTORS, MASK, "float16")
    # Text 2 serves all six vectors: 4 + 6 * 16 * 2 bytes.
    assert rows.shape == (4, 196)
    assert rows[1].tolist() == [0, 0, 0, 0] + [0] * 192
    # Whatever the padding holds, only the counted vectors are read.
    dirty = rows.copy()
    dirty[0, 4 + 3 * 32 :] = 0xFF
    dirty[1, 4:] = 0xFF
    for clean, noisy in zip(
        decode_multivector_rows(rows, "float16", DIMS),
        decode_multivector_rows(dirty, "float16", DIMS),
        strict=True,
    ):
        np.testing.assert_array_equal(clean, noisy)


def test_decodes_no_rows_and_rows_without_vectors() -> None:
    assert decode_multivector_rows(np.zeros((0, 0), np.uint8), "float32", DIMS) == []
    decoded = decode_multivector_rows(np.zeros((2, 4), np.uint8), "int8", DIMS)
    assert [vectors.shape for vectors in decoded] == [(0, DIMS), (0, DIMS)]


def test_refuses_a_truncated_or_malformed_buffer() -> None:
    rows = _rows(VECTORS, MASK, "float32")
    with pytest.raises(ValueError, match="multi-vector row 2 holds 6 vectors of 64 bytes"):
        decode_multivector_rows(rows[:, :-1], "float32", DIMS)
    corrupt = rows.copy()
    corrupt[1, :4] = [200, 0, 0, 0]
    with pytest.raises(ValueError, match="multi-vector row 1 holds 200 vectors"):
        decode_multivector_rows(corrupt, "float32", DIMS)
    # The rows of a float16 response read as float32: 6 vectors need twice the bytes.
    with pytest.raises(ValueError, match="multi-vector row 2 holds 6 vectors"):
        decode_multivector_rows(_rows(VECTORS, MASK, "float16"), "float32", DIMS)
    for bad in (rows.view(np.int8), rows.reshape(-1), np.zeros((1, 3), np.uint8)):
        with pytest.raises(ValueError, match="multi-vector rows are uint8"):
            decode_multivector_rows(bad, "float32", DIMS)


def test_refuses_a_dtype_or_width_it_cannot_decode() -> None:
    rows = _rows(VECTORS, MASK, "float32")
    with pytest.raises(ValueError, match="unknown dtype 'float64'"):
        decode_multivector_rows(rows, "float64", DIMS)
    with pytest.raises(ValueError, match="binary packs 8 dimensions per byte, got 12"):
        decode_multivector_rows(rows, "binary", 12)
    with pytest.raises(ValueError, match="at least 1 dimension"):
        decode_multivector_rows(rows, "float32", 0)


def test_decodes_exactly_what_the_stages_accept() -> None:
    """The tokenizer stage's check (model_common.options) and the decoder
    agree on the dtypes and on the widths a bit-packed one needs."""
    for dtype in ROW_DTYPES:
        assert multivector_option_error({"dtype": dtype, "pool_factor": 2}, DIMS) is None
        assert vector_width(dtype, DIMS) > 0
    assert multivector_option_error({"dtype": "float64"}, DIMS) == (
        "invalid_parameter 'dtype': unknown dtype 'float64' "
        "(expected float32, float16, int8, uint8, binary or ubinary)"
    )
    assert multivector_option_error({"dtype": "ubinary"}, 12) == (
        "invalid_parameter 'dtype': binary and ubinary pack 8 dimensions per byte, "
        "so the dimensions must be a multiple of 8, got 12"
    )
    for name, value in (("dimensions", 8), ("normalize", False), ("max_active_dims", 4)):
        assert multivector_option_error({name: value}, DIMS) == (
            f"invalid_parameter '{name}': multi-vector rows take dtype only"
        )
    assert multivector_option_error({"dtype": 3}, DIMS) == (
        "invalid_parameter 'dtype': must be a string"
    )
