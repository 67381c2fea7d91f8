"""decode_sparse_rows against the reference encoder of docs/contract.md's
"Sparse rows" (harness/sparse_reference.py), without a server: each row's
(indices, values) come back as views of the received bytes."""

from __future__ import annotations

import numpy as np
import pytest
from embedding_client.decode import SPARSE_VALUE_DTYPES, decode_sparse_rows
from model_common.options import SPARSE_VALUE_DTYPES as DECLARED_VALUE_DTYPES

from harness.sparse_reference import reference_entries, reference_sparse_rows

ACTIVATIONS = np.array(
    [
        [0.0, 0.5, 0.0, 2.0, 0.0, 0.1, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0],  # nothing active
        [3.0, 1.0, 3.0, 0.25, 1.0, 0.0, 7.5, 1e-3],  # ties at 3.0 and 1.0
    ],
    dtype=np.float32,
)


def test_the_client_decodes_the_declared_value_dtypes() -> None:
    assert tuple(SPARSE_VALUE_DTYPES) == DECLARED_VALUE_DTYPES == ("float32", "float16")
    assert SPARSE_VALUE_DTYPES["float32"] == np.dtype("<f4")
    assert SPARSE_VALUE_DTYPES["float16"] == np.dtype("<f2")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("max_active_dims", [None, 1, 2, 3, 8])
def test_round_trips_the_reference_rows(dtype: str, max_active_dims: int | None) -> None:
    rows = reference_sparse_rows(ACTIVATIONS, dtype, max_active_dims)
    decoded = decode_sparse_rows(rows, dtype)
    expected = reference_entries(ACTIVATIONS, max_active_dims)
    assert len(decoded) == len(expected)
    for (indices, values), (want_indices, want_values) in zip(decoded, expected, strict=True):
        assert indices.dtype == np.dtype("<u4")
        assert values.dtype == SPARSE_VALUE_DTYPES[dtype]
        assert indices.tolist() == want_indices
        np.testing.assert_array_equal(values, np.array(want_values, np.float32).astype(dtype))
        # Views of the received bytes, not copies (an empty array shares none).
        assert indices.size == 0 or np.shares_memory(indices, rows)
        assert values.size == 0 or np.shares_memory(values, rows)


def test_keeps_the_largest_with_ties_to_the_lower_index() -> None:
    decoded = decode_sparse_rows(reference_sparse_rows(ACTIVATIONS, "float32", 3), "float32")
    assert decoded[2][0].tolist() == [0, 2, 6]
    assert decoded[2][1].tolist() == [3.0, 3.0, 7.5]
    decoded = decode_sparse_rows(reference_sparse_rows(ACTIVATIONS, "float32", 4), "float32")
    assert decoded[2][0].tolist() == [0, 1, 2, 6]


def test_pads_every_row_to_the_widest_and_decodes_empty_rows() -> None:
    rows = reference_sparse_rows(ACTIVATIONS, "float16")
    # Row 2 has 7 active entries: 4 + 7 * (4 + 2) bytes.
    assert rows.shape == (3, 46)
    assert rows[1].tolist() == [0] * 46
    indices, values = decode_sparse_rows(rows, "float16")[1]
    assert indices.size == 0 and values.size == 0


def test_decodes_no_rows() -> None:
    assert decode_sparse_rows(np.zeros((0, 0), np.uint8), "float32") == []


def test_refuses_rows_that_do_not_hold_their_count() -> None:
    rows = reference_sparse_rows(ACTIVATIONS[:1], "float32").copy()
    rows[0, 0] = 200
    with pytest.raises(ValueError, match="sparse row 0 holds 200 entries"):
        decode_sparse_rows(rows, "float32")
    with pytest.raises(ValueError, match="uint8"):
        decode_sparse_rows(rows.view(np.int8), "float32")
    with pytest.raises(ValueError, match="uint8"):
        decode_sparse_rows(np.zeros((1, 2), np.uint8), "float32")
