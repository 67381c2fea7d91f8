"""How an embedder runs the rows of one execute call: sorted by real length
and cut into groups, each padded only to its own longest row, because on CPU
padding, not batch size, dominates the cost. Shared by every CPU embedder,
whatever engine runs the groups."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Tokens = tuple[np.ndarray, np.ndarray]  # INPUT_IDS, ATTENTION_MASK: [rows, length]
Embeddings = tuple[np.ndarray, np.ndarray]  # EMBEDDING [rows, dims], NORM [rows, 1]
# Runs groups of rows, each trimmed to its own length, and returns their
# embeddings in the same order; free to run them one after the other or at once.
RunGroups = Callable[[Sequence[Tokens]], list[Embeddings]]
# Cuts rows, given their real lengths, into groups of row indices.
CutGroups = Callable[[np.ndarray], list[np.ndarray]]


def real_lengths(attention_mask: np.ndarray) -> np.ndarray:
    """Position of each row's last attended token, plus one."""
    attended = attention_mask != 0
    last = attended.shape[1] - np.argmax(attended[:, ::-1], axis=1)
    return np.where(attended.any(axis=1), last, 1)


def groups_by_tokens(
    lengths: np.ndarray, tokens_per_run: int, parallel_runs: int
) -> list[np.ndarray]:
    """Row indices cut into groups of at most tokens_per_run padded tokens
    (a longer row alone), longest rows first: a cap in tokens keeps a group
    of long texts small and lets short ones share one run, where a cap in
    rows suits only one length. Longest first, so that parallel runners
    start the costly groups and the leftover group is the cheapest. Fewer
    groups than parallel_runs are cut again into that many of equal size."""
    order = np.argsort(-lengths, kind="stable")
    groups: list[np.ndarray] = []
    start = 0
    while start < len(order):
        rows = max(1, tokens_per_run // int(lengths[order[start]]))
        groups.append(order[start : start + rows])
        start += rows
    if len(groups) < min(parallel_runs, len(order)):
        return np.array_split(order, min(parallel_runs, len(order)))
    return groups


def embed_in_groups(
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    dims: int,
    cut: CutGroups,
    run_groups: RunGroups,
) -> Embeddings:
    """All rows' embeddings, in the rows' own order."""
    lengths = real_lengths(attention_mask)
    groups = cut(lengths)
    trimmed = []
    for group in groups:
        length = int(lengths[group].max())
        trimmed.append((input_ids[group, :length], attention_mask[group, :length]))
    embedding = np.empty((len(lengths), dims), np.float32)
    norm = np.empty((len(lengths), 1), np.float32)
    for group, (group_embedding, group_norm) in zip(groups, run_groups(trimmed), strict=True):
        embedding[group] = group_embedding
        norm[group] = group_norm
    return embedding, norm


def keep_largest(rows: np.ndarray, kept: int) -> np.ndarray:
    """rows [n, width] with all but each row's `kept` largest values zeroed
    (ties to the lower index, as the serializer's max_active_dims)."""
    if kept >= rows.shape[1]:
        return rows
    # A stable sort of the negated values puts equal values in index order.
    order = np.argsort(-rows, axis=1, kind="stable")[:, :kept]
    out = np.zeros_like(rows)
    np.put_along_axis(out, order, np.take_along_axis(rows, order, axis=1), axis=1)
    return out
