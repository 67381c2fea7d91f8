"""EmbeddingClient: texts or token ids in, numpy arrays out, over gRPC or
HTTP. Inputs larger than the server's max batch size go out as several
requests at once and come back in order."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from types import TracebackType
from typing import Any, Unpack

import gevent
import gevent.pool
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from embedding_client.base import ClientBase
from embedding_client.batching import Request
from embedding_client.call import Answer, Call, Result
from embedding_client.errors import (
    RETRY_AFTER,
    EmbeddingError,
    note_http_answer,
    triton_errors,
)
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
from embedding_client.transport import (
    Connection,
    Headers,
    Protocol,
    grpc_call_options,
    infer,
)


class _GrpcTransport:
    """The gRPC client is thread-safe; a small pool keeps requests in flight."""

    def __init__(self, connection: Connection) -> None:
        self._client = grpcclient.InferenceServerClient(connection.url)
        self._pool = ThreadPoolExecutor(
            connection.max_in_flight, thread_name_prefix="embedding-client"
        )
        self._infer_options = grpc_call_options(connection)
        self._timeout_s = connection.timeout_s
        self._retrier = Retrier(connection.retry)

    def model_config(self, model: str, headers: Headers) -> dict[str, Any]:
        def attempt() -> dict[str, Any]:
            with triton_errors():
                reply = self._client.get_model_config(
                    model, headers=headers, as_json=True, client_timeout=self._timeout_s
                )
            return reply["config"]

        return self._retrier.run(attempt)

    def infer_all(self, call: Call[Any], requests: list[Request], headers: Headers) -> list[Answer]:
        return list(self._pool.map(partial(self._infer, call, headers), requests))

    def _infer(self, call: Call[Any], headers: Headers, request: Request) -> Answer:
        def attempt() -> Answer:
            with triton_errors():
                result = infer(
                    self._client, grpcclient, call, request, headers, self._infer_options
                )
            return call.answer(result)

        return self._retrier.run(attempt)

    def close(self) -> None:
        self._pool.shutdown()
        self._client.close()


class _HeededHttpClient(httpclient.InferenceServerClient):
    """tritonclient's HTTP client, noting each answer's Retry-After for the
    error it builds from that answer (errors.note_http_answer), as its
    errors keep no headers."""

    def _get(self, request_uri: str, headers: Headers, query_params: Any) -> Any:
        response = super()._get(request_uri, headers, query_params)
        note_http_answer(response.status_code, response.get(RETRY_AFTER))
        return response

    def _post(
        self, request_uri: str, request_body: Any, headers: Headers, query_params: Any
    ) -> Any:
        response = super()._post(request_uri, request_body, headers, query_params)
        note_http_answer(response.status_code, response.get(RETRY_AFTER))
        return response


class _HttpTransport:
    """tritonclient's HTTP client runs on gevent and must stay on one thread;
    up to `max_in_flight` requests are in flight, each in a greenlet that
    sends it and reads its answer, so a refusal's Retry-After is read back
    where it was noted (tritonclient's async_infer reads the answer in the
    caller's greenlet, not the sender's)."""

    def __init__(self, connection: Connection) -> None:
        self._client = _HeededHttpClient(
            connection.url,
            concurrency=connection.max_in_flight,
            connection_timeout=connection.timeout_s,
            network_timeout=connection.timeout_s,
        )
        self._pool = gevent.pool.Pool(connection.max_in_flight)
        self._infer_options = {"priority": connection.priority}
        self._retrier = Retrier(connection.retry)

    def model_config(self, model: str, headers: Headers) -> dict[str, Any]:
        def attempt() -> dict[str, Any]:
            with triton_errors():
                return self._client.get_model_config(model, headers=headers)

        return self._retrier.run(attempt)

    def infer_all(self, call: Call[Any], requests: list[Request], headers: Headers) -> list[Answer]:
        def attempt(request: Request) -> Answer:
            with triton_errors():
                result = infer(
                    self._client, httpclient, call, request, headers, self._infer_options
                )
            return call.answer(result)

        def first(request: Request) -> Answer | EmbeddingError:
            # Returned, not raised: gevent prints a greenlet's exception.
            try:
                return attempt(request)
            except EmbeddingError as error:
                return error

        def outcome(sent: gevent.Greenlet) -> Answer:
            answer = sent.get()
            if isinstance(answer, EmbeddingError):
                raise answer
            return answer

        # All sent at once; a refused one is sent again alone.
        pending = [self._pool.spawn(first, request) for request in requests]
        return [
            self._retrier.run(partial(outcome, sent), partial(attempt, request))
            for request, sent in zip(requests, pending, strict=True)
        ]

    def close(self) -> None:
        # The requests of a call that failed early end first.
        self._pool.join()
        self._client.close()


class EmbeddingClient(ClientBase[_GrpcTransport | _HttpTransport]):
    """Texts or token ids in, numpy arrays out; arguments in ClientBase. Not
    for use from several threads at once with protocol="http"."""

    def _open(self, protocol: Protocol, connection: Connection) -> _GrpcTransport | _HttpTransport:
        return _GrpcTransport(connection) if protocol == "grpc" else _HttpTransport(connection)

    def embed(self, texts: str | Sequence[str], **options: Unpack[EmbedKwargs]) -> np.ndarray:
        """[N, k] float32 by default; embedding_client.decode tells the other dtypes."""
        return self._run(self._planner.texts(texts, EmbedOptions(**options)))

    def embed_tokens(
        self, input_ids: object, attention_mask: object, **options: Unpack[EmbedKwargs]
    ) -> np.ndarray:
        """input_ids and attention_mask: [N, L] integer arrays from the server's tokenizer."""
        plan = self._planner.token_arrays(input_ids, attention_mask, EmbedOptions(**options))
        return self._run(plan)

    def embed_token_ids(
        self, rows: Sequence[Sequence[int]], **options: Unpack[EmbedKwargs]
    ) -> np.ndarray:
        """Rows of token ids of any lengths, padded here per request."""
        return self._run(self._planner.token_rows(rows, EmbedOptions(**options)))

    def rerank(
        self, query: str, documents: str | Sequence[str], **options: Unpack[RerankKwargs]
    ) -> list[Ranked]:
        """The documents ranked by relevance to `query`, highest first, top_n
        of them (all by default); the client's model must be a reranker.
        truncate=False refuses a pair over the model's max length instead of
        cutting it; prompt_name puts one of the model's prompts before the
        query (its default prompt, if it has one, goes there unasked)."""
        return self._run(rerank_call(self.model, query, documents, **options))

    def embed_sparse(
        self, texts: str | Sequence[str], **options: Unpack[SparseKwargs]
    ) -> list[SparseRow]:
        """Each text's active vocabulary entries; the client's model must be
        a sparse encoder. max_active_dims keeps that many of the largest."""
        return self._run(sparse_call(self.model, texts, SparseOptions(**options)))

    def embed_multi(
        self, texts: str | Sequence[str], **options: Unpack[MultiVectorKwargs]
    ) -> list[np.ndarray]:
        """Each text's token vectors, [n, D] (of the dtype; packed bytes for binary), n its
        own; the client's model must be a multi-vector encoder. kind: the role the texts are
        encoded in, "query" or "document" (the default)."""
        kind = options.pop("kind", None)
        call = multivector_call(self.model, texts, MultiVectorOptions(input_type=kind, **options))
        return self._run(call)

    def embed_muvera(
        self, texts: str | Sequence[str], **options: Unpack[MuveraKwargs]
    ) -> np.ndarray:
        """Each text's MUVERA encoding, [N, F] (F = r_reps * 2**k_sim * dim_proj; of the dtype,
        packed bytes for binary), whose dot products approximate MaxSim; the client's model
        must be a multi-vector encoder. kind: "query" or "document" (the default); k_sim,
        dim_proj, r_reps, seed: fastembed's Muvera's (None: the server's defaults)."""
        kind = options.pop("kind", None)
        call = muvera_call(self.model, texts, MuveraOptions(input_type=kind, **options))
        return self._run(call)

    def embed_m3(self, texts: str | Sequence[str], **options: Unpack[M3Kwargs]) -> M3Result:
        """A BGE-M3 model's outputs for each text, from one pass: those named in outputs
        ("dense", "sparse", "multivector"; dense by default), None for the others; the
        client's model must be a BGE-M3 model."""
        call = m3_call(self.model, texts, M3Options(**options))
        return self._run(call)

    def max_batch_size(self, model: str) -> int:
        if model not in self._limits:
            config = self._transport.model_config(model, self._headers)
            self._limits[model] = batch_limit(model, config)
        return self._limits[model]

    def _run(self, call: Call[Result]) -> Result:
        requests = call.split(self.max_batch_size(call.model))
        return call.finish(self._transport.infer_all(call, requests, self._headers))

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> EmbeddingClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
