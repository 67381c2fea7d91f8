"""The gateway's work, independent of the HTTP server: authorize, parse,
tokenize, forward to Triton, render; each step a span where the request is
traced (tracing.py)."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import orjson
from embedding_client.aio import AsyncEmbeddingClient
from embedding_client.errors import EmbeddingError
from embedding_client.plan import tokens_model_name
from embedding_client.tokenization import ClientTokenizer

from embedding_gateway.cohere_api import parse_cohere_rerank, render_cohere
from embedding_gateway.errors import ApiError, from_embedding_error
from embedding_gateway.openai_api import (
    EmbeddingsCall,
    ModelObject,
    TokenLimits,
    model_object,
    parse_embeddings_request,
    render_embeddings,
    render_models,
)
from embedding_gateway.served_models import model_not_found
from embedding_gateway.tei_api import (
    parse_tei_embed,
    parse_tei_rerank,
    render_dense,
    render_ranks,
    render_sparse,
)
from embedding_gateway.tracing import UNTRACED, RequestTrace

OWNED_BY = "triton-embedding-service"
# Tokenizing a large input on the event loop would stall every other
# request; a small one costs less inline than a hop to a worker thread.
INLINE_TOKENIZE_CHARS = 64 * 1024
# Reads a request's body (aiohttp's Request.read): inside the parse span.
Body = Callable[[], Awaitable[bytes]]


@dataclass(frozen=True)
class Caller:
    """What of a request goes on to Triton besides its body: the client's
    Authorization header (where keys are forwarded) and, with the request's
    trace, its trace context."""

    authorization: str | None = None
    trace: RequestTrace = UNTRACED


NO_CALLER = Caller()


@dataclass(frozen=True)
class ServedModel:
    """One model of the gateway: its OpenAI name is its Triton name, `client`
    is bound to it (texts to `name`, ids to `{name}_tokens`)."""

    name: str
    tokenizer: ClientTokenizer
    client: AsyncEmbeddingClient

    @property
    def limits(self) -> TokenLimits:
        return TokenLimits(self.tokenizer.max_length, self.tokenizer.vocab_size)


class EmbeddingsService:
    """Texts are tokenized here, once: the ids give usage.prompt_tokens and go
    to Triton's `{model}_tokens`, so Triton does not tokenize them again. A
    request that sets a text option (a prompt, the truncation) sends its texts
    to `{model}` instead, whose tokenizer applies it; its usage counts the
    texts' tokens without the prompt."""

    def __init__(
        self,
        client: AsyncEmbeddingClient,
        models: Sequence[ServedModel],
        api_key: str | None,
        created: int,
        *,
        forward_api_key: bool = False,
        rerankers: Mapping[str, AsyncEmbeddingClient] | None = None,
        sparse: Mapping[str, AsyncEmbeddingClient] | None = None,
    ) -> None:
        """rerankers, sparse: a client bound to each reranker and sparse
        encoder, by name; created: when the models were first served
        (OpenAI's model objects carry it)."""
        self._client = client
        self._created = created
        self._forward_api_key = forward_api_key
        self._models = {model.name: model for model in models}
        self._limits = {model.name: model.limits for model in models}
        self._rerankers = dict(rerankers or {})
        self._sparse = dict(sparse or {})
        self._tasks = (
            dict.fromkeys(self._models, "embed")
            | dict.fromkeys(self._rerankers, "rerank")
            | dict.fromkeys(self._sparse, "sparse")
        )
        self._api_key = api_key.encode() if api_key else None

    @property
    def tasks(self) -> Mapping[str, str]:
        """Every model the gateway serves, by name, with its task."""
        return self._tasks

    def authorize(self, authorization: str | None) -> None:
        if self._api_key is None:
            return
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise ApiError(
                401,
                "Missing API key: send the header 'Authorization: Bearer <API key>'",
                code="missing_api_key",
            )
        if not hmac.compare_digest(token.strip().encode(), self._api_key):
            raise ApiError(401, "Incorrect API key provided", code="invalid_api_key")

    async def create_embeddings(self, read: Body, caller: Caller = NO_CALLER) -> bytes:
        """`caller`: what of the client's request goes on to Triton."""
        with caller.trace.span("parse"):
            request = parse_embeddings_request(await read(), self._limits, self._tasks)
        model = self._models[request.model]
        caller.trace.describe(model.name, len(request.texts) or len(request.token_rows))
        rows = request.token_rows
        if not rows:
            with caller.trace.span("tokenize"):
                rows = await self._tokenize(model.tokenizer, request.texts)
        prompt_tokens = sum(len(row) for row in rows)
        caller.trace.count_tokens(prompt_tokens)
        try:
            vectors = await self._embed(model, request, rows, caller)
        except EmbeddingError as error:
            raise from_embedding_error(error, model.name) from error
        return render_embeddings(vectors, request.encoding_format, model.name, prompt_tokens)

    async def rerank(self, read: Body, version: str, caller: Caller = NO_CALLER) -> bytes:
        """Cohere's rerank (its API `version`), or TEI's without a version."""
        with caller.trace.span("parse"):
            body = await read()
            rerankers = list(self._rerankers)
            if version:
                request = parse_cohere_rerank(body, rerankers, self._tasks)
            else:
                request = parse_tei_rerank(body, rerankers, self._tasks)
        caller.trace.describe(request.model, len(request.documents))
        try:
            with self._calling(self._rerankers[request.model], caller, request.model) as client:
                ranked = await client.rerank(
                    request.query,
                    request.documents,
                    top_n=request.top_n,
                    truncate=request.truncate,
                )
        except EmbeddingError as error:
            raise from_embedding_error(error, request.model) from error
        return render_cohere(ranked, request, version) if version else render_ranks(ranked, request)

    async def tei_embed(self, read: Body, caller: Caller = NO_CALLER) -> bytes:
        """TEI's /embed: texts to the model's text entry point."""
        with caller.trace.span("parse"):
            request = parse_tei_embed(await read(), "embed", list(self._models), self._tasks)
        caller.trace.describe(request.model, len(request.texts))
        try:
            with self._calling(self._models[request.model].client, caller, request.model) as client:
                vectors = await client.embed(
                    request.texts,
                    normalize=request.normalize,
                    dimensions=request.dimensions,
                    **request.text_options,
                )
        except EmbeddingError as error:
            raise from_embedding_error(error, request.model) from error
        return render_dense(vectors)

    async def embed_sparse(self, read: Body, caller: Caller = NO_CALLER) -> bytes:
        """TEI's /embed_sparse."""
        with caller.trace.span("parse"):
            request = parse_tei_embed(await read(), "sparse", list(self._sparse), self._tasks)
        caller.trace.describe(request.model, len(request.texts))
        try:
            with self._calling(self._sparse[request.model], caller, request.model) as client:
                rows = await client.embed_sparse(request.texts, **request.text_options)
        except EmbeddingError as error:
            raise from_embedding_error(error, request.model) from error
        return render_sparse(rows)

    @contextmanager
    def _calling(
        self, client: AsyncEmbeddingClient, caller: Caller, model: str
    ) -> Iterator[AsyncEmbeddingClient]:
        """The client for one call to Triton's `model`, the call's span
        around it: with the request's own key where keys are forwarded and
        with the trace context the call passes on, if any."""
        if self._forward_api_key:
            scheme, _, token = (caller.authorization or "").partition(" ")
            client = client.with_api_key(token.strip() if scheme.lower() == "bearer" else None)
        with caller.trace.call(model) as context:
            yield client.with_trace_context(context)

    async def _embed(
        self,
        model: ServedModel,
        request: EmbeddingsCall,
        rows: list[list[int]],
        caller: Caller,
    ) -> np.ndarray:
        if request.text_options:
            with self._calling(model.client, caller, model.name) as client:
                return await client.embed(
                    request.texts, dimensions=request.dimensions, **request.text_options
                )
        with self._calling(model.client, caller, tokens_model_name(model.name)) as client:
            return await client.embed_token_ids(rows, dimensions=request.dimensions)

    @staticmethod
    async def _tokenize(tokenizer: ClientTokenizer, texts: list[str]) -> list[list[int]]:
        if sum(len(text) for text in texts) <= INLINE_TOKENIZE_CHARS:
            return tokenizer.encode(texts)
        return await asyncio.to_thread(tokenizer.encode, texts)

    def list_models(self) -> bytes:
        return render_models([self._model_object(name) for name in self._tasks])

    def retrieve_model(self, name: str) -> bytes:
        if name not in self._tasks:
            raise model_not_found(name, list(self._tasks))
        return orjson.dumps(self._model_object(name))

    def _model_object(self, name: str) -> ModelObject:
        return model_object(name, self._created, OWNED_BY)

    async def triton_ready(self) -> bool:
        try:
            return await self._client.is_ready()
        except EmbeddingError:
            return False
