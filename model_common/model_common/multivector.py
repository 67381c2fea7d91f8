"""How a multi-vector (ColBERT-style) model's texts become the rows its graph and its scoring
read, per role, as sentence-transformers' MultiVectorEncoder does in encode_query and
encode_document: each role's max length (query_length, document_length), query expansion (the
rows padded to the expansion length with the expansion token, scored though unattended unless
the model attends to them) and the skip-list (token ids never scored, for the roles it names).
The export record carries the model's settings; the tokenizer stages and the export's check both
build their rows here, so what is served is what was checked; the MaxSim scorer scores here.
Standard library and numpy only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

QUERY = "query"
DOCUMENT = "document"
ROLES = (QUERY, DOCUMENT)
# The expansion strategies: "fixed" cuts and pads every query to the length, "min" only pads.
EXPANSION_STRATEGIES = ("fixed", "min")


@dataclass(frozen=True)
class Expansion:
    strategy: str  # one of EXPANSION_STRATEGIES
    length: int  # the width a query is padded to
    attend: bool  # whether the encoder attends to the expansion positions
    token_id: int  # what fills them (the mask token unless the model names another)


@dataclass(frozen=True)
class Rows:
    """A request's rows: the graph's inputs and which positions are scored vectors."""

    input_ids: np.ndarray  # [rows, width] int64
    attention_mask: np.ndarray  # [rows, width] int64
    vector_mask: np.ndarray  # [rows, width] int64: 1 where the position is a served vector


@dataclass(frozen=True)
class MultiVectorRoles:
    max_seq_length: int
    query_length: int | None
    document_length: int | None
    expansion: Expansion | None
    skiplist_ids: frozenset[int]
    skiplist_roles: frozenset[str]

    @classmethod
    def from_record(cls, fields: Mapping[str, object]) -> MultiVectorRoles:
        """The settings a multi-vector export record holds; raises ValueError naming a bad one."""
        expansion = fields.get("query_expansion")
        skiplist_roles = frozenset(str(role) for role in _list(fields, "skiplist_tasks"))
        unknown = sorted(skiplist_roles - set(ROLES))
        if unknown:
            raise ValueError(f"the export record's skiplist_tasks name unknown roles {unknown}")
        return cls(
            max_seq_length=int(str(fields["max_seq_length"])),
            query_length=_optional_int(fields, "query_length"),
            document_length=_optional_int(fields, "document_length"),
            expansion=None if expansion is None else _expansion(expansion),
            skiplist_ids=frozenset(int(str(each)) for each in _list(fields, "skiplist_ids")),
            skiplist_roles=skiplist_roles,
        )

    def max_length(self, role: str) -> int:
        """The most tokens a text of the role keeps (its prompt and special tokens included)."""
        if role == QUERY:
            if self.expansion is not None and self.expansion.strategy == "fixed":
                return self.expansion.length
            length = self.query_length or self.max_seq_length
            if self.expansion is not None:
                length = max(length, self.expansion.length)
            return length
        return self.document_length or self.max_seq_length

    def rows(self, role: str, ids: Sequence[Sequence[int]]) -> Rows:
        """Rows of token ids (each within max_length(role)) padded to the longest (id 0), with
        the expansion a query gets and the mask of the positions served as vectors."""
        expansion = self.expansion if role == QUERY else None
        longest = max(len(row) for row in ids)
        width = longest if expansion is None else max(longest, expansion.length)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        real = np.zeros((len(ids), width), dtype=bool)
        for index, row in enumerate(ids):
            input_ids[index, : len(row)] = row
            real[index, : len(row)] = True
        attention = real.copy()
        scored = real.copy()
        if expansion is not None:
            expanded = ~real & (np.arange(width) < expansion.length)
            input_ids[expanded] = expansion.token_id
            scored |= expanded
            if expansion.attend:
                attention |= expanded
        if role in self.skiplist_roles and self.skiplist_ids:
            skipped = np.isin(input_ids, np.fromiter(self.skiplist_ids, dtype=np.int64))
            scored &= ~skipped
        return Rows(input_ids, attention.astype(np.int64), scored.astype(np.int64))


def maxsim(
    queries: np.ndarray, query_mask: np.ndarray, documents: np.ndarray, mask: np.ndarray
) -> np.ndarray:
    """[rows, 1] MaxSim scores of [rows, Tq, D] query vectors against [rows, Td, D] documents',
    counting the positions each mask names: per query vector the best dot product with the
    document's, summed, as MultiVectorEncoder.similarity scores; 0 for a document without a
    vector."""
    similarities = np.einsum("rqd,rtd->rqt", queries, documents)
    similarities[np.broadcast_to(mask[:, None, :] == 0, similarities.shape)] = -np.inf
    best = similarities.max(axis=2, initial=-np.inf)
    best[~np.isfinite(best)] = 0.0
    return (best * (query_mask != 0)).sum(axis=1, keepdims=True, dtype=np.float32)


def _optional_int(fields: Mapping[str, object], name: str) -> int | None:
    value = fields.get(name)
    return None if value is None else int(str(value))


def _list(fields: Mapping[str, object], name: str) -> list[object]:
    value = fields.get(name, [])
    if not isinstance(value, list):
        raise ValueError(f"the export record's {name} is {value!r}, not a list")
    return value


def _expansion(value: object) -> Expansion:
    if not isinstance(value, dict) or value.get("strategy") not in EXPANSION_STRATEGIES:
        raise ValueError(
            f"the export record's query_expansion {value!r} is not an expansion "
            f"(strategy {' or '.join(EXPANSION_STRATEGIES)}, length, attend, token_id)"
        )
    return Expansion(
        strategy=str(value["strategy"]),
        length=int(value["length"]),
        attend=bool(value["attend"]),
        token_id=int(value["token_id"]),
    )
