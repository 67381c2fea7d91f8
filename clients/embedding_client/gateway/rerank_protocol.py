"""The rerank APIs the gateway serves: Cohere's (`/v1/rerank`, `/v2/rerank`:
query, documents, top_n, return_documents -> results of index and
relevance_score, sorted), which LangChain, LlamaIndex and the Cohere SDK
call, and TEI's (`/rerank`: query, texts -> a list of index and score).
Requests are parsed with their limits here, before anything reaches
Triton; a response is rendered in its API's shape, errors included.

Cohere's and TEI's routes name the model, or leave it out where the
gateway serves one reranker. top_n below 1 is refused; above the number of
documents it keeps them all, as the client library does.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from embedding_client.gateway.errors import ApiError, bad_request
from embedding_client.gateway.protocol import json_object, pick_model
from embedding_client.rerank import Ranked

# Cohere's bound on documents per request.
MAX_DOCUMENTS = 1000
Api = Literal["cohere", "tei"]
FIELDS: dict[Api, frozenset[str]] = {
    "cohere": frozenset(
        {"model", "query", "documents", "top_n", "return_documents", "max_tokens_per_doc"}
    ),
    "tei": frozenset(
        {"model", "query", "texts", "truncate", "raw_scores", "return_text", "truncation_direction"}
    ),
}
# Where each API takes its documents.
DOCUMENTS_FIELD: dict[Api, str] = {"cohere": "documents", "tei": "texts"}


@dataclass(frozen=True)
class RerankRequest:
    model: str
    query: str
    documents: list[str]
    top_n: int | None
    return_documents: bool
    truncate: bool | None


def parse_rerank_request(
    body: bytes, api: Api, rerankers: Sequence[str], tasks: Mapping[str, str]
) -> RerankRequest:
    """rerankers: the gateway's reranker names; tasks: every model it serves,
    by name, for a message naming the task of a model that is not one."""
    payload = json_object(body)
    unknown = sorted(payload.keys() - FIELDS[api])
    if unknown:
        raise bad_request(
            f"Unrecognized request argument supplied: {unknown[0]}", unknown[0], "unknown_parameter"
        )
    model = pick_model(payload.get("model"), rerankers, tasks, "reranker")
    query = payload.get("query")
    if not isinstance(query, str) or not query.strip():
        raise bad_request("'query' is required and must be a non-empty string", "query")
    documents = _documents(payload.get(DOCUMENTS_FIELD[api]), DOCUMENTS_FIELD[api])
    if api == "cohere":
        if payload.get("max_tokens_per_doc") is not None:
            raise bad_request(
                "'max_tokens_per_doc' is not supported: each (query, document) pair is cut "
                "at the model's max length",
                "max_tokens_per_doc",
            )
        return RerankRequest(
            model,
            query,
            documents,
            _top_n(payload.get("top_n")),
            _flag(payload, "return_documents"),
            None,
        )
    if _flag(payload, "raw_scores"):
        raise bad_request(
            "'raw_scores' is not supported: scores come with the model's activation", "raw_scores"
        )
    if payload.get("truncation_direction") not in (None, "right"):
        raise bad_request(
            "'truncation_direction' must be 'right': a pair's longer text is cut first",
            "truncation_direction",
        )
    truncate = payload.get("truncate")
    if truncate is not None and not isinstance(truncate, bool):
        raise bad_request(f"'truncate' must be a boolean, got {truncate!r}", "truncate")
    return RerankRequest(model, query, documents, None, _flag(payload, "return_text"), truncate)


def _documents(value: object, field: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise bad_request(f"'{field}' is required and must be a non-empty array", field)
    if len(value) > MAX_DOCUMENTS:
        raise bad_request(
            f"'{field}' has {len(value)} items; at most {MAX_DOCUMENTS} are allowed", field
        )
    documents = []
    for index, item in enumerate(value):
        # Cohere's v1 also takes {"text": ...} objects.
        text = item.get("text") if isinstance(item, dict) else item
        if not isinstance(text, str):
            raise bad_request(f"'{field}[{index}]' must be a string", field)
        documents.append(text)
    return documents


def _top_n(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_request(f"'top_n' must be a positive integer, got {value!r}", "top_n")
    return value


def _flag(payload: dict[str, Any], field: str) -> bool:
    value = payload.get(field, False)
    if not isinstance(value, bool):
        raise bad_request(f"'{field}' must be a boolean, got {value!r}", field)
    return value


def render_cohere(ranked: list[Ranked], request: RerankRequest, version: str) -> bytes:
    results: list[dict[str, Any]] = []
    for each in ranked:
        result: dict[str, Any] = {"index": each.index, "relevance_score": each.relevance_score}
        if request.return_documents:
            result["document"] = {"text": request.documents[each.index]}
        results.append(result)
    meta = {"api_version": {"version": version}, "billed_units": {"search_units": 1}}
    return orjson.dumps({"id": str(uuid.uuid4()), "results": results, "meta": meta})


def render_tei(ranked: list[Ranked], request: RerankRequest) -> bytes:
    results: list[dict[str, Any]] = []
    for each in ranked:
        result: dict[str, Any] = {"index": each.index, "score": each.relevance_score}
        if request.return_documents:
            result["text"] = request.documents[each.index]
        results.append(result)
    return orjson.dumps(results)


def error_body(error: ApiError, api: Api) -> bytes:
    """The error in the API's own shape: Cohere's message object, TEI's
    error and error_type."""
    if api == "cohere":
        return orjson.dumps({"message": error.message})
    kind = "Validation" if error.status < 500 else "Backend"
    return orjson.dumps({"error": error.message, "error_type": kind})
