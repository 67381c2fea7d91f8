"""MUVERA fixed-dimensional encodings (Dhulipala et al., "MUVERA: Multi-Vector Retrieval via
Fixed Dimensional Encodings", 2024): a text's token vectors -> one vector whose dot product
with another text's approximates their MaxSim, so that a plain single-vector index can run a
late-interaction model's first stage.

Per repetition, k_sim random Gaussian hyperplanes cut the space into 2**k_sim partitions (a
vector's partition is the bits of which side of each it lies on, SimHash); a query's vectors
are summed per partition, a document's averaged, and a document's empty partition takes the
first vector of the occupied partition nearest by Hamming distance; each partition's vector is
then projected to dim_proj by a random +-1 matrix scaled by 1/sqrt(dim_proj) (none where
dim_proj is the vectors' width). The r_reps repetitions' partitions, concatenated, are the
encoding: r_reps * 2**k_sim * dim_proj values.

Parameterized and drawn as fastembed 0.9.1's `fastembed.postprocess.muvera.Muvera`: the same
draws from numpy's default_rng(seed) in the same order, and the same float64 arithmetic, so
that the same parameters, seed and vectors give its encoding (tests/test_muvera.py). numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class MuveraParameters:
    k_sim: int  # hyperplanes per repetition: 2**k_sim partitions
    dim_proj: int  # each partition's width after projection, at most the vectors'
    r_reps: int  # independent repetitions, concatenated
    seed: int  # numpy's default_rng seed for every draw

    @property
    def partitions(self) -> int:
        return 2**self.k_sim

    @property
    def width(self) -> int:
        """The encoding's values."""
        return self.r_reps * self.partitions * self.dim_proj


@dataclass(frozen=True)
class MuveraDraws:
    """The random draws of one set of parameters for vectors of one width."""

    parameters: MuveraParameters
    hyperplanes: np.ndarray  # [r_reps, D, k_sim] float64, each column a hyperplane's normal
    projections: np.ndarray  # [r_reps, D, dim_proj] int64, each entry -1 or 1


def draw(parameters: MuveraParameters, dims: int) -> MuveraDraws:
    """The draws for vectors of `dims` dimensions; ValueError where dim_proj is over dims (a
    projection would widen them)."""
    if parameters.dim_proj > dims:
        raise ValueError(f"dim_proj {parameters.dim_proj} is over the vectors' {dims} dimensions")
    generator = np.random.default_rng(parameters.seed)
    # fastembed's order: each repetition's hyperplanes in turn, then every projection at once.
    hyperplanes = np.stack(
        [generator.normal(size=(dims, parameters.k_sim)) for _ in range(parameters.r_reps)]
    )
    projections = generator.choice([-1, 1], size=(parameters.r_reps, dims, parameters.dim_proj))
    return MuveraDraws(parameters, hyperplanes, projections)


@lru_cache(maxsize=4)
def cached_draws(parameters: MuveraParameters, dims: int) -> MuveraDraws:
    """draw's, kept for the few parameter sets a server sees: drawing costs more than encoding
    a short text."""
    return draw(parameters, dims)


def encode_query(vectors: np.ndarray, draws: MuveraDraws) -> np.ndarray:
    """A query's encoding, [width] float64: its vectors [n, D] summed per partition."""
    return _encode(vectors, draws, document=False)


def encode_document(vectors: np.ndarray, draws: MuveraDraws) -> np.ndarray:
    """A document's encoding, [width] float64: its vectors [n, D] averaged per partition, each
    empty partition filled from the nearest occupied one."""
    return _encode(vectors, draws, document=True)


def _encode(vectors: np.ndarray, draws: MuveraDraws, document: bool) -> np.ndarray:
    parameters = draws.parameters
    dims = draws.hyperplanes.shape[1]
    if vectors.ndim != 2 or vectors.shape[1] != dims:
        raise ValueError(f"vectors must be [n, {dims}], got {list(vectors.shape)}")
    # No vector (a document whose every token is skipped): zeros, which score 0 against any
    # query as MaxSim scores it (fastembed refuses it).
    if len(vectors) == 0:
        return np.zeros(parameters.width)
    blocks = []
    for repetition in range(parameters.r_reps):
        centers = _partition_vectors(vectors, draws.hyperplanes[repetition], document)
        if parameters.dim_proj < dims:
            # fastembed's expression and operand types, for the same rounding.
            centers = (1 / np.sqrt(parameters.dim_proj)) * (centers @ draws.projections[repetition])
        blocks.append(centers.reshape(-1))
    return np.concatenate(blocks)


def _partition_vectors(vectors: np.ndarray, hyperplanes: np.ndarray, document: bool) -> np.ndarray:
    """One repetition's [2**k_sim, D] float64: each partition's sum (a query) or mean and fill
    (a document)."""
    k_sim = hyperplanes.shape[1]
    partitions = 2**k_sim
    # Bit i of a vector's partition: which side of hyperplane i it lies on.
    sides = (vectors @ hyperplanes) > 0
    ids = sides.astype(np.int64) @ (1 << np.arange(k_sim, dtype=np.int64))
    centers = np.zeros((partitions, vectors.shape[1]))
    # Added one vector at a time in token order, as fastembed sums them, for the same rounding.
    np.add.at(centers, ids, vectors)
    if not document:
        return centers
    counts = np.bincount(ids, minlength=partitions)
    occupied = counts > 0
    centers[occupied] /= counts[occupied][:, None]
    empty = np.flatnonzero(~occupied)
    if len(empty):
        # Sorted occupied partitions, each with its first vector; argmin keeps the lowest of
        # equally near ones, as fastembed does.
        occupied_ids, first = np.unique(ids, return_index=True)
        nearest = np.argmin(_popcount(empty[:, None] ^ occupied_ids[None, :], k_sim), axis=1)
        centers[empty] = vectors[first[nearest]]
    return centers


def _popcount(values: np.ndarray, bits: int) -> np.ndarray:
    """The set bits of each of `values`, non-negative integers below 2**bits."""
    return ((values[..., None] >> np.arange(bits)) & 1).sum(axis=-1)
