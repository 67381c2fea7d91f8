"""AsyncEmbeddingClient: the asyncio twin of EmbeddingClient, on
tritonclient.grpc.aio or tritonclient.http.aio. Create it inside a running
event loop (the HTTP flavor opens an aiohttp session)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import ModuleType, TracebackType
from typing import Any, Unpack

import aiohttp
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio

from embedding_client import transport
from embedding_client.base import ClientBase
from embedding_client.batching import Request
from embedding_client.call import Answer, Call, Result
from embedding_client.errors import RETRY_AFTER, note_http_answer, triton_errors
from embedding_client.m3 import M3Kwargs, M3Options, M3Result, m3_call
from embedding_client.multivector import multivector_call
from embedding_client.muvera import muvera_call
from embedding_client.options import (
    EmbedKwargs,
    EmbedOptions,
    MultiVectorKwargs,
    MultiVectorOptions,
    MuveraKwargs,
    MuveraOptions,
    RerankKwargs,
    SparseKwargs,
    SparseOptions,
)
from embedding_client.plan import batch_limit
from embedding_client.rerank import Ranked, rerank_call
from embedding_client.retry import Retrier
from embedding_client.sparse import SparseRow, sparse_call
from embedding_client.transport import Connection, Headers


class _AsyncTransport:
    """What both protocols do alike: a bound on requests in flight, and infer with the
    protocol's tritonclient module and its own keyword arguments."""

    def __init__(
        self,
        client: Any,
        module: ModuleType,
        connection: Connection,
        options: dict[str, Any],
        connection_errors: tuple[type[Exception], ...] = (),
    ) -> None:
        self._client = client
        self._module = module
        self._connection_errors = connection_errors
        self._slots = asyncio.Semaphore(connection.max_in_flight)
        self._options = options
        self._retrier = Retrier(connection.retry)

    async def infer(self, call: Call[Any], request: Request, headers: Headers) -> Answer:
        async def attempt() -> Answer:
            # The slot is held by a send, not by the wait before a retry.
            with triton_errors(self._connection_errors):
                async with self._slots:
                    result = await transport.infer(
                        self._client, self._module, call, request, headers, self._options
                    )
            return call.answer(result)

        return await self._retrier.run_async(attempt)

    async def close(self) -> None:
        await self._client.close()


class _AsyncGrpcTransport(_AsyncTransport):
    def __init__(self, connection: Connection) -> None:
        client = grpcaio.InferenceServerClient(connection.url)
        super().__init__(client, grpcclient, connection, transport.grpc_call_options(connection))
        self._timeout_s = connection.timeout_s

    async def model_config(self, model: str, headers: Headers) -> dict[str, Any]:
        async def attempt() -> dict[str, Any]:
            with triton_errors():
                reply = await self._client.get_model_config(
                    model, headers=headers, as_json=True, client_timeout=self._timeout_s
                )
            return reply["config"]

        return await self._retrier.run_async(attempt)

    async def is_ready(self) -> bool:
        with triton_errors():
            return await self._client.is_server_ready(client_timeout=self._timeout_s)


class _HeededHttpClient(httpaio.InferenceServerClient):
    """tritonclient's asyncio HTTP client, noting each answer's Retry-After
    for the error it builds from that answer, in the same task
    (errors.note_http_answer), as its errors keep no headers."""

    async def _get(
        self, request_uri: str, headers: Headers, query_params: Any
    ) -> aiohttp.ClientResponse:
        response = await super()._get(request_uri, headers, query_params)
        note_http_answer(response.status, response.headers.get(RETRY_AFTER))
        return response

    async def _post(
        self, request_uri: str, request_body: Any, headers: Headers, query_params: Any
    ) -> aiohttp.ClientResponse:
        response = await super()._post(request_uri, request_body, headers, query_params)
        note_http_answer(response.status, response.headers.get(RETRY_AFTER))
        return response


class _AsyncHttpTransport(_AsyncTransport):
    def __init__(self, connection: Connection) -> None:
        client = _HeededHttpClient(
            connection.url, conn_limit=connection.max_in_flight, conn_timeout=connection.timeout_s
        )
        options = {"priority": connection.priority}
        # A connection the server closed, as aiohttp names it.
        lost = (aiohttp.ClientConnectionError,)
        super().__init__(client, httpclient, connection, options, lost)

    async def model_config(self, model: str, headers: Headers) -> dict[str, Any]:
        async def attempt() -> dict[str, Any]:
            with triton_errors(self._connection_errors):
                return await self._client.get_model_config(model, headers=headers)

        return await self._retrier.run_async(attempt)

    async def is_ready(self) -> bool:
        with triton_errors(self._connection_errors):
            return await self._client.is_server_ready()


class AsyncEmbeddingClient(ClientBase[_AsyncGrpcTransport | _AsyncHttpTransport]):
    """EmbeddingClient's asyncio twin: the same arguments and methods, awaited."""

    def _open(
        self, protocol: transport.Protocol, connection: Connection
    ) -> _AsyncGrpcTransport | _AsyncHttpTransport:
        if protocol == "grpc":
            return _AsyncGrpcTransport(connection)
        return _AsyncHttpTransport(connection)

    async def embed(self, texts: str | Sequence[str], **options: Unpack[EmbedKwargs]) -> np.ndarray:
        return await self._run(self._planner.texts(texts, EmbedOptions(**options)))

    async def embed_tokens(
        self, input_ids: object, attention_mask: object, **options: Unpack[EmbedKwargs]
    ) -> np.ndarray:
        plan = self._planner.token_arrays(input_ids, attention_mask, EmbedOptions(**options))
        return await self._run(plan)

    async def embed_token_ids(
        self, rows: Sequence[Sequence[int]], **options: Unpack[EmbedKwargs]
    ) -> np.ndarray:
        return await self._run(self._planner.token_rows(rows, EmbedOptions(**options)))

    async def rerank(
        self, query: str, documents: str | Sequence[str], **options: Unpack[RerankKwargs]
    ) -> list[Ranked]:
        return await self._run(rerank_call(self.model, query, documents, **options))

    async def embed_sparse(
        self, texts: str | Sequence[str], **options: Unpack[SparseKwargs]
    ) -> list[SparseRow]:
        return await self._run(sparse_call(self.model, texts, SparseOptions(**options)))

    async def embed_multi(
        self, texts: str | Sequence[str], **options: Unpack[MultiVectorKwargs]
    ) -> list[np.ndarray]:
        """Each text's token vectors, [n, D] (of the dtype; packed bytes for binary), n its
        own; the client's model must be a multi-vector encoder. kind: the role the texts are
        encoded in, "query" or "document" (the default)."""
        kind = options.pop("kind", None)
        call = multivector_call(self.model, texts, MultiVectorOptions(input_type=kind, **options))
        return await self._run(call)

    async def embed_muvera(
        self, texts: str | Sequence[str], **options: Unpack[MuveraKwargs]
    ) -> np.ndarray:
        """Each text's MUVERA encoding, [N, F] (F = r_reps * 2**k_sim * dim_proj; of the dtype,
        packed bytes for binary), whose dot products approximate MaxSim; the client's model
        must be a multi-vector encoder. kind: "query" or "document" (the default); k_sim,
        dim_proj, r_reps, seed: fastembed's Muvera's (None: the server's defaults)."""
        kind = options.pop("kind", None)
        call = muvera_call(self.model, texts, MuveraOptions(input_type=kind, **options))
        return await self._run(call)

    async def embed_m3(self, texts: str | Sequence[str], **options: Unpack[M3Kwargs]) -> M3Result:
        """A BGE-M3 model's outputs for each text, from one pass: those named in outputs
        ("dense", "sparse", "multivector"; dense by default), None for the others; the
        client's model must be a BGE-M3 model."""
        call = m3_call(self.model, texts, M3Options(**options))
        return await self._run(call)

    async def max_batch_size(self, model: str) -> int:
        if model not in self._limits:
            config = await self._transport.model_config(model, self._headers)
            self._limits[model] = batch_limit(model, config)
        return self._limits[model]

    async def is_ready(self) -> bool:
        return await self._transport.is_ready()

    async def _run(self, call: Call[Result]) -> Result:
        requests = call.split(await self.max_batch_size(call.model))
        return call.finish(await self._gather(call, requests))

    async def _gather(self, call: Call[Any], requests: list[Request]) -> list[Answer]:
        """Every request's output, all in flight at once, in order."""
        tasks = [
            asyncio.ensure_future(self._transport.infer(call, request, self._headers))
            for request in requests
        ]
        # One failed request fails the call, once the others have ended: a
        # request cancelled in flight can crash tritonserver 24.10 (its gRPC
        # frontend's cancellation: SIGSEGV in pthread_mutex_lock, under a
        # burst past a one-request queue, tests/test_retry.py).
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return list(outcomes)  # type: ignore[arg-type]

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncEmbeddingClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
