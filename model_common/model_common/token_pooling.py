"""Token pooling of a multi-vector encoder's vectors, as sentence-transformers'
HierarchicalTokenPooling pools them: the first `protected` vectors kept, the
rest clustered by Ward linkage on cosine distance into `len // pool_factor`
clusters (at least one), each cluster replaced by its mean, clusters in label
order after the protected vectors; then every vector L2-normalized where
`normalize` asks. A row's pooling is up to two steps in turn (POOLING_STEPS):
the model's own (its export record's "token_pooling", for the roles its
"tasks" name) and the request's pool_factor (ST's per-call pooling, which
compounds on the model's). numpy and scipy only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

# A row's steps: the model's pooling, then the request's; a factor of 0 skips its step.
POOLING_STEPS = 2
NO_POOLING = 0.0
# torch.nn.functional.normalize's floor on a norm, so a zero vector stays zero.
_NORM_EPSILON = 1e-12


@dataclass(frozen=True)
class TokenPooling:
    pool_factor: float  # >= 1; 1 clusters nothing (normalizes only, where asked)
    protected: int = 1  # leading vectors never clustered (the [CLS])
    normalize: bool = True

    def pool(self, vectors: np.ndarray) -> np.ndarray:
        """[n, D] float32 vectors -> [m, D], m <= n."""
        kept, to_pool = vectors[: self.protected], vectors[self.protected :]
        clusters = max(int(len(to_pool) // self.pool_factor), 1)
        if clusters < len(to_pool):
            vectors = np.concatenate([kept, _cluster_means(to_pool, clusters)])
        if not self.normalize:
            return vectors
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.maximum(norms, _NORM_EPSILON)).astype(np.float32)


# ST's per-call pooling as a request's pool_factor builds it: HierarchicalTokenPooling's defaults.
def request_pooling(pool_factor: float) -> TokenPooling:
    return TokenPooling(pool_factor)


def _cluster_means(vectors: np.ndarray, clusters: int) -> np.ndarray:
    """Ward clusters of the vectors by cosine distance, each one's mean, in label order."""
    distances = np.clip(1 - vectors @ vectors.T, 0, 2)
    tree = linkage(squareform(distances, checks=False), method="ward")
    # fcluster may give fewer labels than asked (ties): dense-index those it gave.
    labels = np.unique(fcluster(tree, t=clusters, criterion="maxclust"), return_inverse=True)[1]
    sums = np.zeros((labels.max() + 1, vectors.shape[1]), np.float32)
    np.add.at(sums, labels, vectors)
    return sums / np.bincount(labels)[:, None].astype(np.float32)


@dataclass(frozen=True)
class ModelPooling:
    """A model's own token pooling (HierarchicalTokenPooling in its pipeline) and the roles it
    pools, as its export record carries them."""

    pooling: TokenPooling
    tasks: frozenset[str]

    @classmethod
    def from_record(cls, fields: Mapping[str, object]) -> ModelPooling | None:
        """The record's "token_pooling", or None for a model without; raises ValueError."""
        value = fields.get("token_pooling")
        if value is None:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("tasks"), list):
            raise ValueError(f"the export record's token_pooling {value!r} is not a pooling")
        pooling = TokenPooling(
            float(value["pool_factor"]),
            int(value["num_protected_tokens"]),
            bool(value["normalize_embeddings"]),
        )
        return cls(pooling, frozenset(str(task) for task in value["tasks"]))


def row_factors(model: ModelPooling | None, role: str, requested: float | None) -> np.ndarray:
    """A row's [POOLING_STEPS] factors: the model's where its pooling covers the role, then the
    request's (NO_POOLING where a step does not apply)."""
    own = model.pooling.pool_factor if model is not None and role in model.tasks else NO_POOLING
    # float64, as the request's JSON number: a float32 copy of 1.2 floors 6 tokens into 4
    # clusters where sentence-transformers makes 5.
    return np.array([own, NO_POOLING if requested is None else requested], np.float64)


def pool_rows(
    vectors: np.ndarray, mask: np.ndarray, factors: np.ndarray, model: ModelPooling | None
) -> tuple[np.ndarray, np.ndarray]:
    """[rows, T, D] vectors, their [rows, T] served mask and [rows, POOLING_STEPS] factors ->
    the vectors and mask served: a pooled row's vectors first, its mask 1 for as many; a row
    without pooling as it came."""
    pooled_rows = np.flatnonzero((factors != NO_POOLING).any(axis=1))
    if not len(pooled_rows):
        return vectors, mask
    vectors, mask = vectors.copy(), mask.copy()
    for row in pooled_rows:
        served = vectors[row][mask[row] != 0]
        for step, factor in enumerate(factors[row]):
            if factor != NO_POOLING:
                served = _step(model, step, float(factor)).pool(served)
        vectors[row] = 0
        vectors[row, : len(served)] = served
        mask[row] = np.arange(mask.shape[1]) < len(served)
    return vectors, mask


def _step(model: ModelPooling | None, step: int, factor: float) -> TokenPooling:
    if step == 0 and model is not None:
        return model.pooling
    return request_pooling(factor)
