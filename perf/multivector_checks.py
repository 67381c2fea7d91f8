"""perf/multivector.py's checks that the served path does MultiVectorEncoder's work: one request's
served float32 vectors against encode_document's (the same count per document, each vector at a
cosine of at least MIN_COSINE, as tests/test_multivector.py holds them) and its served MaxSim
scores against MultiVectorEncoder.similarity's (within MAX_SCORE_DIFFERENCE)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Per vector, float32 on both sides: the same graph's arithmetic against torch's.
MIN_COSINE = 0.9999
# MaxSim sums a query's best dot products: 32 of them within a few 1e-6 each.
MAX_SCORE_DIFFERENCE = 1e-3


@dataclass(frozen=True)
class VectorCheck:
    """One request's vectors, per document, against the reference's."""

    what: str
    texts: int
    count_mismatches: int  # documents whose vector counts differ
    min_cosine: float  # over every vector of the documents whose counts agree

    @property
    def ok(self) -> bool:
        return self.count_mismatches == 0 and self.min_cosine >= MIN_COSINE

    def line(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return (
            f"{self.what}, {self.texts} documents: {self.count_mismatches} with another number "
            f"of vectors, min cosine {self.min_cosine:.6f} (at least {MIN_COSINE:g}): {verdict}"
        )


def check_vectors(
    what: str,
    served: Sequence[npt.NDArray[np.floating]],
    reference: Sequence[npt.NDArray[np.floating]],
) -> VectorCheck:
    mismatches = 0
    worst = 1.0
    for got, want in zip(served, reference, strict=True):
        if got.shape != want.shape:
            mismatches += 1
            continue
        got32, want32 = got.astype(np.float32), want.astype(np.float32)
        norms = np.linalg.norm(got32, axis=1) * np.linalg.norm(want32, axis=1)
        cosines = (got32 * want32).sum(axis=1) / norms
        worst = min(worst, float(cosines.min(initial=1.0)))
    return VectorCheck(what, len(served), mismatches, worst)


@dataclass(frozen=True)
class ScoreCheck:
    """One request's MaxSim scores against MultiVectorEncoder.similarity's."""

    what: str
    max_difference: float

    @property
    def ok(self) -> bool:
        return self.max_difference <= MAX_SCORE_DIFFERENCE

    def line(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return (
            f"{self.what}: max |score difference| {self.max_difference:.2e} (allowed "
            f"{MAX_SCORE_DIFFERENCE:g}): {verdict}"
        )


def check_scores(
    what: str, served: Sequence[float], reference: npt.NDArray[np.float32]
) -> ScoreCheck:
    if len(served) != len(reference):
        # A score missing or extra is as wrong as a score can be.
        return ScoreCheck(what, float("inf"))
    difference = np.abs(np.asarray(served, np.float64) - reference.astype(np.float64))
    return ScoreCheck(what, float(difference.max()))
