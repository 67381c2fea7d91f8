"""The gateway's work, independent of the HTTP server: authorize, parse,
tokenize, forward to Triton, render."""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass

import orjson

from embedding_client.aio import AsyncEmbeddingClient
from embedding_client.errors import EmbeddingError
from embedding_client.gateway.errors import ApiError, from_embedding_error
from embedding_client.gateway.protocol import (
    TokenLimits,
    model_object,
    parse_embeddings_request,
    render_embeddings,
    render_models,
)
from embedding_client.tokenization import ClientTokenizer

OWNED_BY = "triton-embedding-service"
# Tokenizing a large input on the event loop would stall every other
# request; a small one costs less inline than a hop to a worker thread.
INLINE_TOKENIZE_CHARS = 64 * 1024


@dataclass(frozen=True)
class ServedModel:
    name: str
    created: int


class EmbeddingsService:
    """Texts are tokenized here, once: the ids give usage.prompt_tokens and go
    to Triton's `embed_tokens`, so Triton does not tokenize them again."""

    def __init__(
        self,
        client: AsyncEmbeddingClient,
        tokenizer: ClientTokenizer,
        model: ServedModel,
        api_key: str | None,
    ) -> None:
        self._client = client
        self._tokenizer = tokenizer
        self._model = model
        self._limits = TokenLimits(tokenizer.max_length, tokenizer.vocab_size)
        self._api_key = api_key.encode() if api_key else None

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

    async def create_embeddings(self, body: bytes) -> bytes:
        request = parse_embeddings_request(body, self._model.name, self._limits)
        rows = request.token_rows or await self._tokenize(request.texts)
        try:
            vectors = await self._client.embed_token_ids(rows, dimensions=request.dimensions)
        except EmbeddingError as error:
            raise from_embedding_error(error) from error
        prompt_tokens = sum(len(row) for row in rows)
        return render_embeddings(vectors, request.encoding_format, self._model.name, prompt_tokens)

    async def _tokenize(self, texts: list[str]) -> list[list[int]]:
        if sum(len(text) for text in texts) <= INLINE_TOKENIZE_CHARS:
            return self._tokenizer.encode(texts)
        return await asyncio.to_thread(self._tokenizer.encode, texts)

    def list_models(self) -> bytes:
        return render_models([self._model_object()])

    def retrieve_model(self, name: str) -> bytes:
        if name != self._model.name:
            raise ApiError(
                404, f"The model '{name}' does not exist", param="model", code="model_not_found"
            )
        return orjson.dumps(self._model_object())

    def _model_object(self) -> dict[str, object]:
        return model_object(self._model.name, self._model.created, OWNED_BY)

    async def triton_ready(self) -> bool:
        try:
            return await self._client.is_ready()
        except EmbeddingError:
            return False
