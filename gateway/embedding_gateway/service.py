"""The gateway's work, independent of the HTTP server: authorize, parse,
tokenize, forward to Triton, render; each step a span where the request is
traced (tracing.py)."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import orjson
from embedding_catalog.tasks import EMBED, RERANK, SPARSE
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
from embedding_gateway.pooling_api import parse_pooling, render_pooling, render_raw
from embedding_gateway.routes import TASK_ROUTES
from embedding_gateway.served_models import ServedModels, model_not_found
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


class EmbeddingsService:
    """Texts are tokenized here, once: the ids give usage.prompt_tokens and go
    to Triton's `{model}_tokens`, so Triton does not tokenize them again. A
    request that sets a text option (a prompt, the truncation) sends its texts
    to `{model}` instead, whose tokenizer applies it; its usage counts the
    texts' tokens without the prompt."""

    def __init__(
        self,
        client: AsyncEmbeddingClient,
        tasks: Mapping[str, str],
        tokenizers: Mapping[str, ClientTokenizer],
        api_key: str | None,
        created: int,
        *,
        forward_api_key: bool = False,
    ) -> None:
        """tasks: every model the gateway serves, by name (its OpenAI name is
        its Triton name), with its task; tokenizers: those of the models
        whose texts it tokenizes, the embedding models; created: when the
        models were first served (OpenAI's model objects carry it)."""
        self._client = client
        self._created = created
        self._forward_api_key = forward_api_key
        # Each bound to its model: texts to `name`, ids to `{name}_tokens`.
        self._clients = {name: client.with_model(name) for name in tasks}
        self._tokenizers = dict(tokenizers)
        self._limits = {
            name: TokenLimits(tokenizer.max_length, tokenizer.vocab_size)
            for name, tokenizer in tokenizers.items()
        }
        self._served = ServedModels(dict(tasks), TASK_ROUTES)
        self._api_key = api_key.encode() if api_key else None

    @property
    def served(self) -> ServedModels:
        """Every model the gateway serves, by name, with its task."""
        return self._served

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
            request = parse_embeddings_request(await read(), self._limits, self._served)
        model = request.model
        caller.trace.describe(model, len(request.texts) or len(request.token_rows))
        rows = request.token_rows
        if not rows:
            with caller.trace.span("tokenize"):
                rows = await self._tokenize(self._tokenizers[model], request.texts)
        prompt_tokens = sum(len(row) for row in rows)
        caller.trace.count_tokens(prompt_tokens)
        vectors = await self._embed(request, rows, caller)
        return render_embeddings(vectors, request.encoding_format, model, prompt_tokens)

    async def rerank(self, read: Body, version: str, caller: Caller = NO_CALLER) -> bytes:
        """Cohere's rerank (its API `version`), or TEI's without a version."""
        with caller.trace.span("parse"):
            body = await read()
            if version:
                request = parse_cohere_rerank(body, self._served)
            else:
                request = parse_tei_rerank(body, self._served)
        caller.trace.describe(request.model, len(request.documents))
        # A multi-vector encoder reranks at an entry point of its own.
        entry_point = self._served.entry_point(request.model, RERANK.name)
        with self._calling(request.model, caller, entry_point) as client:
            ranked = await client.with_model(entry_point).rerank(
                request.query, request.documents, top_n=request.top_n, truncate=request.truncate
            )
        return render_cohere(ranked, request, version) if version else render_ranks(ranked, request)

    async def tei_embed(self, read: Body, caller: Caller = NO_CALLER) -> bytes:
        """TEI's /embed: texts to the model's text entry point."""
        with caller.trace.span("parse"):
            request = parse_tei_embed(await read(), EMBED.name, self._served)
        caller.trace.describe(request.model, len(request.texts))
        with self._calling(request.model, caller) as client:
            vectors = await client.embed(
                request.texts,
                normalize=request.normalize,
                dimensions=request.dimensions,
                **request.text_options,
            )
        return render_dense(vectors)

    async def embed_sparse(self, read: Body, caller: Caller = NO_CALLER) -> bytes:
        """TEI's /embed_sparse."""
        with caller.trace.span("parse"):
            request = parse_tei_embed(await read(), SPARSE.name, self._served)
        caller.trace.describe(request.model, len(request.texts))
        with self._calling(request.model, caller) as client:
            rows = await client.embed_sparse(request.texts, **request.text_options)
        return render_sparse(rows)

    async def pooling(
        self, read: Body, caller: Caller = NO_CALLER, raw: bool = False
    ) -> tuple[bytes, dict[str, str]]:
        """vLLM's /pooling (token_embed): the body and its headers, the vectors as raw bytes
        where the request accepts them (`raw`)."""
        with caller.trace.span("parse"):
            request = parse_pooling(await read(), self._served)
        caller.trace.describe(request.model, len(request.texts))
        with self._calling(request.model, caller) as client:
            vectors = await client.embed_multi(
                request.texts,
                kind=request.kind,
                dtype=request.dtype,
                pool_factor=request.pool_factor,
                **request.text_options,
            )
        if raw:
            return render_raw(vectors, request.dtype)
        return render_pooling(vectors, request.model), {}

    @contextmanager
    def _calling(
        self, served: str, caller: Caller, model: str | None = None
    ) -> Iterator[AsyncEmbeddingClient]:
        """The client of the served model `served` for one call to Triton's
        `model` (None: the served model's own entry point), the call's span
        around it: with the request's own key where keys are forwarded and
        with the trace context the call passes on, if any. Triton's refusal
        is answered in the API's terms (errors.py)."""
        client = self._clients[served]
        if self._forward_api_key:
            scheme, _, token = (caller.authorization or "").partition(" ")
            client = client.with_api_key(token.strip() if scheme.lower() == "bearer" else None)
        try:
            with caller.trace.call(model or served) as context:
                yield client.with_trace_context(context)
        except EmbeddingError as error:
            raise from_embedding_error(error, served) from error

    async def _embed(
        self, request: EmbeddingsCall, rows: list[list[int]], caller: Caller
    ) -> np.ndarray:
        if request.text_options:
            with self._calling(request.model, caller) as client:
                return await client.embed(
                    request.texts, dimensions=request.dimensions, **request.text_options
                )
        with self._calling(request.model, caller, tokens_model_name(request.model)) as client:
            return await client.embed_token_ids(rows, dimensions=request.dimensions)

    @staticmethod
    async def _tokenize(tokenizer: ClientTokenizer, texts: list[str]) -> list[list[int]]:
        if sum(len(text) for text in texts) <= INLINE_TOKENIZE_CHARS:
            return tokenizer.encode(texts)
        return await asyncio.to_thread(tokenizer.encode, texts)

    def list_models(self) -> bytes:
        return render_models([self._model_object(name) for name in self._served.tasks])

    def retrieve_model(self, name: str) -> bytes:
        if name not in self._served.tasks:
            raise model_not_found(name, list(self._served.tasks))
        return orjson.dumps(self._model_object(name))

    def _model_object(self, name: str) -> ModelObject:
        return model_object(name, self._created, OWNED_BY)

    async def triton_ready(self) -> bool:
        try:
            return await self._client.is_ready()
        except EmbeddingError:
            return False
