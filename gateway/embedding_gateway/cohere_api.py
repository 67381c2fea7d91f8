"""Cohere's rerank API (`/v1/rerank`, `/v2/rerank`: query, documents, top_n,
return_documents -> results of index and relevance_score, sorted), which
LangChain, LlamaIndex and the Cohere SDK call: the request and response
bodies, declared once here, from which requests are validated, refusals
worded (refusals.py) and the OpenAPI document written (openapi.py)."""

from __future__ import annotations

import uuid
from typing import Annotated, NotRequired

import orjson
from embedding_catalog.tasks import RERANK
from embedding_client.options import RERANK_OPTIONS
from embedding_client.rerank import Ranked
from pydantic import BaseModel, ConfigDict, Discriminator, Tag
from typing_extensions import TypedDict

from embedding_gateway.fields import Phrase, option_type
from embedding_gateway.refusals import PLAIN_WORDS, parse
from embedding_gateway.reranking import RerankCall, RerankRequest, document_list
from embedding_gateway.served_models import ServedModels


class DocumentObject(BaseModel):
    """Cohere's v1 document object; only its text is ranked."""

    model_config = ConfigDict(extra="ignore", strict=True)
    text: str


def _kind(value: object) -> str | None:
    return "text" if isinstance(value, str) else "object" if isinstance(value, dict) else None


CohereDocument = Annotated[
    Annotated[str, Tag("text")] | Annotated[DocumentObject, Tag("object")],
    Discriminator(_kind),
    Phrase("a string or an object with a text"),
]
CohereDocuments = document_list(CohereDocument)
TopN = option_type(RERANK_OPTIONS["top_n"])
MaxTokensPerDoc = Annotated[
    None,
    Phrase("null: not supported, each (query, document) pair is cut at the model's max length"),
]


class CohereRerankRequest(RerankRequest):
    """POST /v1/rerank and /v2/rerank."""

    documents: CohereDocuments
    top_n: TopN = None
    return_documents: bool = False
    max_tokens_per_doc: MaxTokensPerDoc = None


class RankedText(TypedDict):
    text: str


class CohereResult(TypedDict):
    index: int
    relevance_score: float
    document: NotRequired[RankedText]


class ApiVersion(TypedDict):
    version: str


class BilledUnits(TypedDict):
    search_units: int


class CohereMeta(TypedDict):
    api_version: ApiVersion
    billed_units: BilledUnits


class CohereRerankResponse(TypedDict):
    id: str
    results: list[CohereResult]
    meta: CohereMeta


def parse_cohere_rerank(body: bytes, served: ServedModels) -> RerankCall:
    request = parse(CohereRerankRequest, body, PLAIN_WORDS)
    texts = [item if isinstance(item, str) else item.text for item in request.documents]
    model = served.pick(request.model, RERANK.name)
    return RerankCall(model, request.query, texts, request.top_n, request.return_documents, None)


def render_cohere(ranked: list[Ranked], call: RerankCall, version: str) -> bytes:
    results: list[CohereResult] = []
    for each in ranked:
        result = CohereResult(index=each.index, relevance_score=each.relevance_score)
        if call.return_documents:
            result["document"] = RankedText(text=call.documents[each.index])
        results.append(result)
    meta = CohereMeta(
        api_version=ApiVersion(version=version), billed_units=BilledUnits(search_units=1)
    )
    return orjson.dumps(CohereRerankResponse(id=str(uuid.uuid4()), results=results, meta=meta))
