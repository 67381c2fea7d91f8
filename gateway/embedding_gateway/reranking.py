"""What a rerank request asks for, in Cohere's API or TEI's: the query, the
documents, how many to answer and whether with their texts. Cohere's and
TEI's routes name the model, or leave it out where the gateway serves one
reranker. top_n above the number of documents keeps them all, as the
client library does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, Field

from embedding_gateway.fields import STRICT, Phrase

# Cohere's bound on documents per request.
MAX_DOCUMENTS = 1000
# A query with some text: a blank one ranks nothing.
Query = Annotated[str, Field(pattern=r"\S"), Phrase("a string with some text")]


class RerankRequest(BaseModel):
    """What a rerank request body of either API starts with: the model, which may be left
    out where the gateway serves one reranker, and the query."""

    model_config = STRICT
    model: str | None = None
    query: Query


def document_list(item: object) -> object:
    """A list of 1 to MAX_DOCUMENTS `item`s."""
    return Annotated[
        list[item],  # type: ignore[valid-type]
        Field(min_length=1, max_length=MAX_DOCUMENTS),
        Phrase("a non-empty array of documents"),
    ]


@dataclass(frozen=True)
class RerankCall:
    model: str
    query: str
    documents: list[str]
    top_n: int | None
    return_documents: bool
    truncate: bool | None
