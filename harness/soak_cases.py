"""The requests a soak sends, each a fixed request whose answer can be
compared with the one it got before the load: good requests of every task,
size and route, and bad requests of every class, over gRPC and HTTP, to
Triton directly, through the gateway and through the edge. An answer is
reduced to its status, its error message and its rows, so that two answers
compare whatever route they came by."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import aiohttp
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from embedding_client.batching import split_texts
from embedding_client.call import Call
from embedding_client.options import EmbedOptions, SparseOptions
from embedding_client.plan import embedding_call
from embedding_client.rerank import Ranked, rerank_call
from embedding_client.sparse import sparse_call
from embedding_client.transport import infer
from tritonclient.utils import InferenceServerException

from harness.load import short_texts
from harness.soak_stack import (
    BURST_KEY,
    EMBED_MODEL,
    EMBED_ONLY_KEY,
    RERANK_MODEL,
    SPARSE_MODEL,
    TENANT_KEY,
    SoakStack,
)

Headers = dict[str, str]
OK = "OK"
# No answer came: the connection failed or the client's own deadline passed.
UNANSWERED = "no answer"
# The client's deadline: far past any answer's time on the slowest machine
# with the soak's few requests in flight, so a request past it was lost.
CLIENT_TIMEOUT_S = 60.0
# Same rows: float16's rounding step at 1.0 is 4.9e-4, and what a request
# is batched with moves float32 values by about 1e-6.
ROW_TOLERANCE = 1e-3
# A document over the models' max lengths (256 and 512 tokens): truncation
# decides its rows.
LONG_TEXT = " ".join(short_texts(40))


@dataclass(frozen=True)
class Answer:
    status: str  # OK, UNANSWERED, a gRPC status name or an HTTP status code
    message: str = ""
    rows: tuple[np.ndarray, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == OK


def same(reference: Answer, answer: Answer) -> bool:
    """The same status and message, and for an OK the same rows."""
    if (reference.status, reference.message) != (answer.status, answer.message):
        return False
    return len(reference.rows) == len(answer.rows) and all(
        expected.shape == got.shape
        and bool(np.all(np.abs(expected.astype(np.float64) - got) <= ROW_TOLERANCE))
        for expected, got in zip(reference.rows, answer.rows, strict=True)
    )


class Connections:
    """The soak's clients, opened in its event loop: tritonclient's asyncio
    clients to Triton and to the edge, one HTTP session for the gateway and
    the edge's HTTP port."""

    def __init__(self, stack: SoakStack) -> None:
        self.stack = stack
        self.grpc = {
            "direct": grpcaio.InferenceServerClient(stack.server.grpc_url),
            "edge": grpcaio.InferenceServerClient(stack.edge.grpc_url),
        }
        self.http = {
            "direct": httpaio.InferenceServerClient(stack.server.http_url, conn_limit=256),
            "edge": httpaio.InferenceServerClient(stack.edge.http_url, conn_limit=256),
        }
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S),
            connector=aiohttp.TCPConnector(limit=256),
        )

    async def close(self) -> None:
        for client in (*self.grpc.values(), *self.http.values()):
            await client.close()
        await self.session.close()


Send = Callable[[Connections, Headers, int | None], Awaitable[Answer]]


@dataclass(frozen=True)
class Case:
    """One fixed request: `send` takes more headers (a trace context) and
    Triton's queue deadline in microseconds (None: the model's own)."""

    name: str
    route: str  # direct, gateway or edge
    protocol: str  # grpc or http
    model: str  # the catalog model it calls, or names
    good: bool
    send: Send


def _rows(result: Any) -> tuple[np.ndarray, ...]:
    """An answer's rows, whatever the task: embeddings [N, k]; a reranker's
    scores in document order; sparse rows as dense vectors, so that an entry
    a rounding turned on or off at ~0 compares within the tolerance."""
    if isinstance(result, np.ndarray):
        return (result.astype(np.float32),)
    if result and isinstance(result[0], Ranked):
        ranked = sorted(result, key=lambda each: each.index)
        return (np.array([each.relevance_score for each in ranked], np.float32),)
    return tuple(_dense(row.indices, row.values) for row in result)


def _dense(indices: np.ndarray, values: np.ndarray) -> np.ndarray:
    # Any vocabulary size holds: the comparison pads the shorter.
    width = int(indices.max()) + 1 if len(indices) else 0
    dense = np.zeros(max(width, SPARSE_WIDTH), np.float32)
    dense[indices.astype(np.int64)] = values.astype(np.float32)
    return dense


# Wider than the test encoders' vocabularies (harness/sparse_encoder_models.py)
# and MiniLM's, so dense rows of one model share a shape.
SPARSE_WIDTH = 1 << 15


def _triton_error(error: InferenceServerException) -> Answer:
    status = str(error.status())
    message = error.message() or ""
    # tritonclient's own deadline and a channel that cannot connect: no
    # answer came from the server.
    if status == "StatusCode.DEADLINE_EXCEEDED" and "Deadline Exceeded" in message:
        return Answer(UNANSWERED, message)
    if status == "StatusCode.UNAVAILABLE" and ("connect" in message or "Socket" in message):
        return Answer(UNANSWERED, message)
    return Answer(status, message)


def _triton_case(route: str, protocol: str, call: Call[Any], key: str | None) -> Send:
    auth = {"authorization": f"Bearer {key}"} if key else {}
    module: ModuleType = grpcclient if protocol == "grpc" else httpclient
    (request,) = call.split(1 << 20)

    async def send(connections: Connections, headers: Headers, timeout_us: int | None) -> Answer:
        client = (connections.grpc if protocol == "grpc" else connections.http)[route]
        options: dict[str, Any] = {}
        if timeout_us is not None:
            options["timeout"] = timeout_us
        if protocol == "grpc":
            options["client_timeout"] = CLIENT_TIMEOUT_S
        try:
            result = await infer(client, module, call, request, {**auth, **headers}, options)
        except InferenceServerException as error:
            return _triton_error(error)
        except (TimeoutError, aiohttp.ClientError) as error:
            return Answer(UNANSWERED, f"{type(error).__name__}: {error}")
        return Answer(OK, rows=_rows(call.finish([call.answer(result)])))

    return send


def _gateway_case(path: str, body: bytes, rows: Callable[[Any], tuple[np.ndarray, ...]]) -> Send:
    async def send(connections: Connections, headers: Headers, timeout_us: int | None) -> Answer:
        del timeout_us  # the gateway sets Triton's
        url = connections.stack.gateway.url + path
        try:
            async with connections.session.post(
                url, data=body, headers={"Content-Type": "application/json", **headers}
            ) as reply:
                text = await reply.text()
                if reply.status != 200:
                    return Answer(str(reply.status), text)
                return Answer(OK, rows=rows(json.loads(text)))
        except (TimeoutError, aiohttp.ClientError) as error:
            return Answer(UNANSWERED, f"{type(error).__name__}: {error}")

    return send


def _on_gateway(
    what: str,
    model: str,
    path: str,
    body: bytes,
    rows: Callable[[Any], tuple[np.ndarray, ...]],
    *,
    good: bool,
) -> Case:
    return Case(
        f"{what} gateway http", "gateway", "http", model, good, _gateway_case(path, body, rows)
    )


def _openai_rows(body: dict[str, Any]) -> tuple[np.ndarray, ...]:
    vectors = [
        np.frombuffer(base64.b64decode(item["embedding"]), "<f4")
        if isinstance(item["embedding"], str)
        else np.asarray(item["embedding"], np.float32)
        for item in body["data"]
    ]
    return (np.stack(vectors),)


def _scores(results: Sequence[dict[str, Any]], field: str) -> tuple[np.ndarray, ...]:
    ordered = sorted(results, key=lambda each: each["index"])
    return (np.array([each[field] for each in ordered], np.float32),)


def _tei_sparse_rows(body: list[list[dict[str, Any]]]) -> tuple[np.ndarray, ...]:
    return tuple(
        _dense(
            np.array([entry["index"] for entry in row], np.int64),
            np.array([entry["value"] for entry in row], np.float32),
        )
        for row in body
    )


def _texts(count: int, offset: int) -> list[str]:
    picked = short_texts(offset + count)[offset:]
    return [LONG_TEXT, *picked[1:]] if count > 1 else picked


def _body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def good_cases() -> list[Case]:
    """Every task at 1, 8 and 32 texts (one of each batch over the max
    length), every row format a route offers, over every route."""
    cases: list[Case] = []
    for route, key in (("direct", None), ("edge", TENANT_KEY)):
        for protocol in ("grpc", "http"):
            for size, dtype in ((1, "float32"), (8, "float16"), (32, "float32")):
                texts = _texts(size, size)
                calls: list[tuple[str, str, Call[Any]]] = [
                    (
                        f"embed {size} {dtype}",
                        EMBED_MODEL,
                        embedding_call(
                            EMBED_MODEL,
                            lambda _, t=texts: split_texts(t, len(t)),
                            EmbedOptions(dtype=dtype),
                        ),
                    ),
                    (
                        f"rerank {size}",
                        RERANK_MODEL,
                        rerank_call(RERANK_MODEL, "how are requests batched?", texts),
                    ),
                    (
                        f"sparse {size} {dtype}",
                        SPARSE_MODEL,
                        sparse_call(SPARSE_MODEL, texts, SparseOptions(dtype=dtype)),
                    ),
                ]
                cases += [
                    Case(
                        f"{what} {route} {protocol}",
                        route,
                        protocol,
                        model,
                        True,
                        _triton_case(route, protocol, call, key),
                    )
                    for what, model, call in calls
                ]
    for size in (1, 8, 32):
        texts = _texts(size, 2 * size)
        query = "which stage tokenizes?"
        gateway = [
            (
                f"openai float {size}",
                EMBED_MODEL,
                "/v1/embeddings",
                _body(model=EMBED_MODEL, input=texts, encoding_format="float"),
                _openai_rows,
            ),
            (
                f"openai base64 {size}",
                EMBED_MODEL,
                "/v1/embeddings",
                _body(model=EMBED_MODEL, input=texts, encoding_format="base64"),
                _openai_rows,
            ),
            (
                f"tei embed {size}",
                EMBED_MODEL,
                "/embed",
                _body(model=EMBED_MODEL, inputs=texts),
                lambda body: (np.asarray(body, np.float32),),
            ),
            (
                f"cohere rerank {size}",
                RERANK_MODEL,
                "/v2/rerank",
                _body(model=RERANK_MODEL, query=query, documents=texts),
                lambda body: _scores(body["results"], "relevance_score"),
            ),
            (
                f"tei rerank {size}",
                RERANK_MODEL,
                "/rerank",
                _body(model=RERANK_MODEL, query=query, texts=texts),
                lambda body: _scores(body, "score"),
            ),
            (
                f"tei sparse {size}",
                SPARSE_MODEL,
                "/embed_sparse",
                _body(model=SPARSE_MODEL, inputs=texts),
                _tei_sparse_rows,
            ),
        ]
        cases += [_on_gateway(*entry, good=True) for entry in gateway]
    return cases


def _bad_call(
    model: str, parameters: dict[str, Any], texts: Sequence[str], output: str
) -> Call[Any]:
    """A call the client would refuse before sending: the server's refusal
    is what is soaked."""
    return Call.of_output(
        model, parameters, output, lambda _: split_texts(list(texts), len(texts)), list
    )


def bad_cases() -> list[Case]:
    """A request of each class the service refuses, on each route."""
    text = ["a text"]
    triton: list[tuple[str, str, str, str | None, Call[Any]]] = [
        (
            "unknown dtype",
            "direct",
            EMBED_MODEL,
            None,
            _bad_call(EMBED_MODEL, {"dtype": "float64"}, text, "EMBEDDING"),
        ),
        (
            "dimensions out of range",
            "direct",
            EMBED_MODEL,
            None,
            _bad_call(EMBED_MODEL, {"dimensions": 999}, text, "EMBEDDING"),
        ),
        (
            "unknown model",
            "direct",
            "no-such-model",
            None,
            _bad_call("no-such-model", {}, text, "EMBEDDING"),
        ),
        (
            "too many texts",
            "direct",
            EMBED_MODEL,
            None,
            _bad_call(EMBED_MODEL, {}, ["t"] * 1025, "EMBEDDING"),
        ),
        (
            "sparse max_active_dims 0",
            "direct",
            SPARSE_MODEL,
            None,
            _bad_call(SPARSE_MODEL, {"max_active_dims": 0}, text, "SPARSE"),
        ),
        (
            "rerank without a query",
            "direct",
            RERANK_MODEL,
            None,
            _bad_call(RERANK_MODEL, {}, text, "SCORE"),
        ),
        ("no key", "edge", EMBED_MODEL, None, _bad_call(EMBED_MODEL, {}, text, "EMBEDDING")),
        (
            "wrong key",
            "edge",
            EMBED_MODEL,
            "not-a-tenant-key",
            _bad_call(EMBED_MODEL, {}, text, "EMBEDDING"),
        ),
        (
            "model not the tenant's",
            "edge",
            RERANK_MODEL,
            EMBED_ONLY_KEY,
            _bad_call(RERANK_MODEL, {}, text, "SCORE"),
        ),
    ]
    cases = [
        Case(
            f"{what} {route} {protocol}",
            route,
            protocol,
            model,
            False,
            _triton_case(route, protocol, call, key),
        )
        for what, route, model, key, call in triton
        for protocol in ("grpc", "http")
    ]
    gateway: list[tuple[str, str, str, bytes]] = [
        ("unknown model", EMBED_MODEL, "/v1/embeddings", _body(model="no-such-model", input=text)),
        ("empty input", EMBED_MODEL, "/v1/embeddings", _body(model=EMBED_MODEL, input=[])),
        (
            "dimensions out of range",
            EMBED_MODEL,
            "/v1/embeddings",
            _body(model=EMBED_MODEL, input=text, dimensions=999),
        ),
        (
            "an embedding model reranking",
            EMBED_MODEL,
            "/v2/rerank",
            _body(model=EMBED_MODEL, query="q", documents=text),
        ),
        (
            "a reranker embedding sparse",
            RERANK_MODEL,
            "/embed_sparse",
            _body(model=RERANK_MODEL, inputs=text),
        ),
        ("rerank without texts", RERANK_MODEL, "/rerank", _body(model=RERANK_MODEL, query="q")),
        ("not JSON", EMBED_MODEL, "/v1/embeddings", b'{"model": "all-MiniLM'),
    ]
    cases += [_on_gateway(*entry, lambda _: (), good=False) for entry in gateway]
    return cases


def burst_case() -> Case:
    """What a burst sends: one short text through the edge as the tenant
    whose quota it goes over."""
    call = embedding_call(
        EMBED_MODEL, lambda _: split_texts(["a burst"], 1), EmbedOptions(dtype="float32")
    )
    send = _triton_case("edge", "grpc", call, BURST_KEY)
    return Case("embed 1 burst edge grpc", "edge", "grpc", EMBED_MODEL, True, send)
