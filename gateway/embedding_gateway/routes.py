"""The gateway's routes, each with its API (whose error body it answers
with), the schemas of its request and response bodies and the task of
the models its request names: what app.py serves and openapi.py
documents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from typing_extensions import TypedDict

from embedding_gateway.cohere_api import CohereRerankRequest, CohereRerankResponse
from embedding_gateway.errors import Api
from embedding_gateway.logs import HEALTH_PREFIX
from embedding_gateway.openai_api import (
    EmbeddingsRequest,
    EmbeddingsResponse,
    ModelList,
    ModelObject,
)
from embedding_gateway.pooling_api import PoolingRequest, PoolingResponse
from embedding_gateway.tei_api import (
    TeiEmbeddings,
    TeiEmbedRequest,
    TeiRanks,
    TeiRerankRequest,
    TeiSparseEmbeddings,
    TeiSparseRequest,
)

OPENAPI_PATH = "/openapi.json"
# The versions of Cohere's rerank API, each at its own path (/v1/rerank).
COHERE_VERSIONS = ("1", "2")


class Health(TypedDict):
    status: Literal["live", "ready"]


@dataclass(frozen=True)
class Route:
    method: Literal["GET", "POST"]
    path: str
    api: Api
    summary: str
    response: Any
    request: type[BaseModel] | None = None
    # The task of the models the request's `model` names.
    task: str | None = None

    @property
    def open(self) -> bool:
        """Answered without a key: the health checks a balancer or kubelet asks."""
        return self.path.startswith(HEALTH_PREFIX)


ROUTES = (
    Route(
        "POST",
        "/v1/embeddings",
        "openai",
        "OpenAI's embeddings: texts or token ids to embeddings",
        EmbeddingsResponse,
        EmbeddingsRequest,
        "embed",
    ),
    Route("GET", "/v1/models", "openai", "OpenAI's list of the models served", ModelList),
    Route("GET", "/v1/models/{model}", "openai", "OpenAI's model object of one", ModelObject),
    *(
        Route(
            "POST",
            f"/v{version}/rerank",
            "cohere",
            f"Cohere's rerank, v{version}",
            CohereRerankResponse,
            CohereRerankRequest,
            "rerank",
        )
        for version in COHERE_VERSIONS
    ),
    Route("POST", "/rerank", "tei", "TEI's rerank", TeiRanks, TeiRerankRequest, "rerank"),
    Route("POST", "/embed", "tei", "TEI's embed", TeiEmbeddings, TeiEmbedRequest, "embed"),
    # TEI's root route, which huggingface_hub's InferenceClient posts to.
    Route("POST", "/", "tei", "TEI's embed, at its root", TeiEmbeddings, TeiEmbedRequest, "embed"),
    Route(
        "POST",
        "/embed_sparse",
        "tei",
        "TEI's sparse embeddings",
        TeiSparseEmbeddings,
        TeiSparseRequest,
        "sparse",
    ),
    Route(
        "POST",
        "/pooling",
        "openai",
        "vLLM's pooling (token_embed): texts to their token vectors",
        PoolingResponse,
        PoolingRequest,
        "multivector",
    ),
    Route("GET", "/health/live", "openai", "The gateway is up", Health),
    Route("GET", "/health/ready", "openai", "The gateway and Triton are ready", Health),
    Route("GET", OPENAPI_PATH, "openai", "This document", dict[str, Any]),
)
# Each path's API, for the error body of any answer on it (a 405 included).
PATH_APIS: dict[str, Api] = {route.path: route.api for route in ROUTES}
# The route a message names for a task: the first that serves it (read in
# reverse, so that it is the last written).
TASK_ROUTES: dict[str, str] = {
    route.task: route.path for route in reversed(ROUTES) if route.task is not None
}
