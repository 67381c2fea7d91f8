"""A reranker's call, shared by the sync and asyncio clients: the query and
documents checked, cut into requests of at most the server's max batch
size (one (query, document) pair per row), and the scores that come back
ranked. top_n below 1 is refused; above the number of documents it keeps
them all, as Cohere's API does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from embedding_client.batching import Request, Tensor, checked_texts, spans
from embedding_client.call import Call
from embedding_client.errors import InvalidInputError
from embedding_client.options import RERANK_OPTIONS, Parameters, TextOptions

# The score output of a reranker's entry point (model_repository/reranker/rerank).
SCORE_OUTPUT = "SCORE"


@dataclass(frozen=True)
class Ranked:
    """One document's place: its index in the documents sent, its score."""

    index: int
    relevance_score: float


def rerank_call(
    model: str,
    query: str,
    documents: str | Sequence[str],
    *,
    top_n: int | None = None,
    truncate: bool | None = None,
    prompt_name: str | None = None,
) -> Call[list[Ranked]]:
    """The call, or InvalidInputError naming what is wrong with it. Which
    prompt names exist is the server's to say, per model."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query is empty: a query needs some text")
    items = checked_texts(documents, "documents")
    problem = RERANK_OPTIONS["top_n"].problem(top_n)
    if problem is not None:
        raise InvalidInputError(f"top_n {problem}")
    options = TextOptions(prompt_name=prompt_name, truncate=truncate)
    parameters: Parameters = {name: getattr(options, name) for name in options.text_options}
    split = partial(_pairs_requests, query, items)
    return Call.of_output(model, parameters, SCORE_OUTPUT, split, partial(_ranked, top_n))


def _pairs_requests(query: str, documents: list[str], limit: int) -> list[Request]:
    """Requests of at most `limit` pairs: the query repeated per row."""
    return [_pairs_request(query, documents[span]) for span in spans(len(documents), limit)]


def _pairs_request(query: str, documents: Sequence[str]) -> Request:
    queries = np.full((len(documents), 1), query.encode("utf-8"), dtype=np.object_)
    texts = np.array([[document.encode("utf-8")] for document in documents], dtype=np.object_)
    return [Tensor("QUERY", queries, "BYTES"), Tensor("TEXT", texts, "BYTES")]


def _ranked(top_n: int | None, parts: Sequence[np.ndarray]) -> list[Ranked]:
    """The documents by score, highest first (ties by index), top_n of them."""
    scores = np.concatenate([part.reshape(-1) for part in parts])
    order = np.argsort(-scores, kind="stable")[:top_n]
    return [Ranked(int(index), float(scores[index])) for index in order]
