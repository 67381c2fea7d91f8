"""What perf/sparse.py reports of the sparse rows themselves: the served rows checked against
SparseEncoder.encode's (the rule of export/sparse_check.py and tests/test_sparse.py), and their
bytes per row on the wire, in our row format (clients/embedding_client/row_formats.json,
"sparse") and as TEI's JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from statistics import fmean

import numpy as np
import numpy.typing as npt
from embedding_client import SparseRow
from embedding_client.decode import ROW_DTYPES

_ROW_FORMAT = json.loads(
    files("embedding_client").joinpath("row_formats.json").read_text(encoding="utf-8")
)["sparse"]
COUNT_BYTES: int = _ROW_FORMAT["count"]["bytes"]
INDEX_BYTES: int = _ROW_FORMAT["index"]["bytes"]
VALUE_BYTES: dict[str, int] = {
    entry["name"]: entry["bytes_per_value"] for entry in _ROW_FORMAT["value_dtypes"]
}
# float32 on both sides, the same graph's arithmetic against torch's. A term active on one side
# only (the relu of a logit within rounding of 0) counts as 0 on the other, so it passes only
# below the bar, as export/sparse_check.py's floor has it.
MAX_VALUE_DIFFERENCE = 1e-4


@dataclass(frozen=True)
class RowCheck:
    """One request's served rows against SparseEncoder.encode's."""

    texts: int
    # The largest value difference over every term active on either side.
    max_difference: float
    one_sided: int  # terms active on one side only, all rows together

    @property
    def ok(self) -> bool:
        return self.max_difference <= MAX_VALUE_DIFFERENCE

    def line(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return (
            f"served rows vs SparseEncoder.encode, {self.texts} texts: max |value difference| "
            f"{self.max_difference:.2e} over every term active on either side (allowed "
            f"{MAX_VALUE_DIFFERENCE:g}), {self.one_sided} terms active on one side only: {verdict}"
        )


def _values_at(terms: npt.NDArray[np.uint32], row: SparseRow) -> npt.NDArray[np.float32]:
    """The row's values at `terms` (ascending, holding the row's indices), 0 where inactive."""
    values = np.zeros(len(terms), np.float32)
    values[np.searchsorted(terms, row.indices)] = row.values
    return values


def check_rows(served: Sequence[SparseRow], reference: Sequence[SparseRow]) -> RowCheck:
    worst = 0.0
    one_sided = 0
    for ours, theirs in zip(served, reference, strict=True):
        terms = np.union1d(ours.indices, theirs.indices)
        difference = np.abs(_values_at(terms, ours) - _values_at(terms, theirs))
        worst = max(worst, float(difference.max(initial=0.0)))
        one_sided += len(np.setxor1d(ours.indices, theirs.indices))
    return RowCheck(len(served), worst, one_sided)


def row_bytes(active: int, dtype: str) -> int:
    """One row's count, indices and values in the row format."""
    return COUNT_BYTES + active * (INDEX_BYTES + VALUE_BYTES[dtype])


@dataclass(frozen=True)
class WireBytes:
    """Mean bytes per row over every request's rows of one model, and its dense row's."""

    active_terms: float
    own: dict[str, float]  # by value dtype: each row's count, indices and values
    sent: dict[str, float]  # by value dtype: each padded to its response's widest row
    tei_json: float  # our gateway's TEI /embed_sparse body, measured
    dense_float32: int


def wire_bytes(
    responses: Sequence[Sequence[SparseRow]], tei_bodies: Sequence[bytes], hidden: int
) -> WireBytes:
    """responses: each request's rows, one response each (a request of 32 texts is under the
    entry point's max batch size, so the client sends it whole); tei_bodies: the same requests
    posted to the gateway's TEI route."""
    counts = [[len(row.indices) for row in rows] for rows in responses]
    every = [count for per_response in counts for count in per_response]
    # The rows of one response share its widest row's width (docs/contract.md, "Sparse rows").
    widths = [max(per_response) for per_response in counts for _ in per_response]
    return WireBytes(
        active_terms=fmean(every),
        own={dtype: fmean(row_bytes(count, dtype) for count in every) for dtype in VALUE_BYTES},
        sent={dtype: fmean(row_bytes(width, dtype) for width in widths) for dtype in VALUE_BYTES},
        tei_json=sum(len(body) for body in tei_bodies) / len(every),
        dense_float32=hidden * ROW_DTYPES["float32"].itemsize,
    )
