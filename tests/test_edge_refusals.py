"""The edge's refusals speak the service's error grammar (server/edge/refusals.py):
the table against the models' grammar and the client library's reading of
it, then each refusal from a real Envoy in front of a real tritonserver,
over HTTP (the table's status, a JSON body whose `error` tritonclient reads
as the message) and over gRPC (the table's code, the same message)."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from embedding_client.errors import (
    AccessError,
    EmbeddingError,
    InvalidInputError,
    ServerError,
    UnavailableError,
    from_triton,
)
from model_common.errors import ErrorKind, error_message
from tritonclient.utils import InferenceServerException

from harness.edge import RunningEdge, edge_for_tenants, tenant_toml
from harness.ports import free_loopback_ports
from harness.server import RunningServer
from server.edge.config import BUFFER_LIMIT_BYTES, local_replies
from server.edge.refusals import KIND_MEMBER, KINDS, MESSAGE_MEMBER, REFUSALS, lua_table
from server.launch_plan import Endpoints

KEY = "refusals-key"
SLOW_KEY = "refusals-slow-key"
SLOW_RATE = 2
TEXTS_KEY = "refusals-texts-key"
TEXTS_RATE = 2
# What the client library makes of each kind's status (embedding_client.errors).
CLIENT_CLASSES: dict[str, type[EmbeddingError]] = {
    "invalid_parameter": InvalidInputError,
    "invalid_input": InvalidInputError,
    "input_too_large": InvalidInputError,
    "unauthenticated": AccessError,
    "permission_denied": AccessError,
    "quota_exceeded": UnavailableError,
    "unavailable": UnavailableError,
    "internal": ServerError,
}
GRPC_CODES = {code.value[0]: str(code) for code in grpc.StatusCode}
BUFFER_MIB = str(BUFFER_LIMIT_BYTES // 2**20)


def _words(name: str) -> tuple[str, ...]:
    """Stand-ins for the request's words in a refusal's detail."""
    return tuple(f"word{i}" for i in range(REFUSALS[name].detail.count("%s")))


# The table ------------------------------------------------------------------


def test_every_kind_has_a_status_and_every_refusal_a_kind() -> None:
    assert {refusal.kind for refusal in REFUSALS.values()} == set(KINDS)
    for name, refusal in REFUSALS.items():
        # Only %s placeholders: the Lua filters fill them with string.format,
        # Envoy's local replies with its command operators.
        assert re.sub("%s", "", refusal.detail).count("%") == 0, name
        assert refusal.message(*_words(name)).isascii(), name


def test_the_models_kinds_are_written_as_the_models_write_them() -> None:
    models = {kind.value for kind in ErrorKind}
    shared = [name for name, refusal in REFUSALS.items() if refusal.kind in models]
    assert shared, "no refusal of the models' kinds: nothing was compared"
    for name in shared:
        refusal = REFUSALS[name]
        words = _words(name)
        detail = refusal.detail % words if words else refusal.detail
        expected = error_message(ErrorKind(refusal.kind), detail, refusal.parameter)
        assert refusal.message(*words) == expected, name


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_the_client_library_reads_each_refusal(name: str) -> None:
    """As tritonclient raises it over HTTP (the body's `error`, the status)
    and over gRPC (the message, the code): the class the kind's status
    makes, and the kind and the parameter (the library knows every kind)."""
    refusal = REFUSALS[name]
    message = refusal.message(*_words(name))
    for status in (str(refusal.http_status), GRPC_CODES[refusal.grpc_status]):
        error = from_triton(InferenceServerException(message, status=status))
        assert type(error) is CLIENT_CLASSES[refusal.kind], (name, status)
        assert (error.kind, error.parameter) == (refusal.kind, refusal.parameter), name


def test_the_lua_filters_get_every_refusal() -> None:
    table = lua_table()
    for name, refusal in REFUSALS.items():
        assert f'["{name}"] = {{http = {refusal.http_status}, grpc = "{refusal.grpc_status}"' in (
            table
        )
    assert f'local ERROR_MEMBERS = {{message = "{MESSAGE_MEMBER}", kind = "{KIND_MEMBER}"}}' in (
        table
    )


def test_envoys_own_refusals_are_rewritten_grpc_first() -> None:
    """The Lua filters' refusals pass as they are; then each of Envoy's own,
    for gRPC requests (the message and the code), then for the rest (the
    JSON body and the status)."""
    lua, *mappers = local_replies()
    assert set(lua) == {"filter"} and "metadata_filter" in lua["filter"]
    half = len(mappers) // 2
    grpc_mappers, http_mappers = mappers[:half], mappers[half:]
    for mapper in grpc_mappers:
        (header,) = mapper["headers_to_add"]
        assert header["header"]["key"] == "grpc-status"
        message = mapper["body_format_override"]["text_format_source"]["inline_string"]
        assert any(message.startswith(r.prefix) for r in REFUSALS.values()), message
    for mapper in http_mappers:
        body = mapper["body_format_override"]["json_format"]
        assert set(body) == {MESSAGE_MEMBER, KIND_MEMBER}
        assert mapper["status_code"] == KINDS[body[KIND_MEMBER]].http


# From a real Envoy ----------------------------------------------------------


@pytest.fixture(scope="module")
def edge(
    triton_server: RunningServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningEdge]:
    tenants = (
        tenant_toml("search", [KEY], ["embed"])
        + tenant_toml("slow", [SLOW_KEY], ["embed"], rate=SLOW_RATE)
        + tenant_toml("texts", [TEXTS_KEY], ["embed"], texts_rate=TEXTS_RATE)
    )
    stages = {"embed": ("tokenizer", "embedder", "serializer")}
    workdir = tmp_path_factory.mktemp("edge_refusals")
    with edge_for_tenants(triton_server.endpoints, tenants, workdir, stages) as running:
        yield running


def _http(url: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", path, body=body, headers=headers)
        reply = connection.getresponse()
        return reply.status, reply.getheader("content-type") or "", reply.read()
    finally:
        connection.close()


def _texts(count: int) -> bytes:
    data = ["a text"] * count
    tensor = {"name": "TEXT", "shape": [count, 1], "datatype": "BYTES", "data": data}
    return json.dumps({"inputs": [tensor]}).encode()


def _grpc_text(count: int) -> grpcclient.InferInput:
    batch = np.array([[b"a text"]] * count, dtype=np.object_)
    tensor = grpcclient.InferInput("TEXT", list(batch.shape), "BYTES")
    tensor.set_data_from_numpy(batch)
    return tensor


def _grpc_refusal(call: Callable[[], object]) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as refused:
        call()
    return str(refused.value.status()), str(refused.value.message())


def _assert_http(answer: tuple[int, str, bytes], name: str, *words: str) -> None:
    refusal = REFUSALS[name]
    status, content_type, body = answer
    assert status == refusal.http_status, (name, answer)
    assert content_type == "application/json", (name, answer)
    assert json.loads(body) == refusal.http_body(*words), (name, answer)


def _assert_grpc(answer: tuple[str, str], name: str, *words: str) -> None:
    refusal = REFUSALS[name]
    assert answer == (GRPC_CODES[refusal.grpc_status], refusal.message(*words)), name


def test_who_may_call_what(edge: RunningEdge) -> None:
    infer = "/v2/models/embed/infer"
    bearer = {"authorization": f"Bearer {KEY}"}
    cases = [
        ("no_key", infer, {}, ()),
        ("unknown_key", infer, {"authorization": "Bearer not-a-key"}, ()),
        ("query_string", f"{infer}?key={KEY}", bearer, ()),
        ("not_offered", "/v2/repository/index", bearer, ()),
        ("model_not_allowed", "/v2/models/other/infer", bearer, ("other",)),
        ("stage_not_callable", "/v2/models/tokenizer/infer", bearer, ("tokenizer",)),
    ]
    for name, path, headers, words in cases:
        _assert_http(_http(edge.http_url, path, headers, b"{}"), name, *words)
    client = grpcclient.InferenceServerClient(edge.grpc_url)
    try:
        text = [_grpc_text(1)]
        _assert_grpc(_grpc_refusal(lambda: client.infer("embed", text)), "no_key")
        wrong = {"authorization": "Bearer not-a-key"}
        _assert_grpc(
            _grpc_refusal(lambda: client.infer("embed", text, headers=wrong)), "unknown_key"
        )
        index = _grpc_refusal(lambda: client.get_model_repository_index(headers=bearer))
        _assert_grpc(index, "not_offered")
        other = _grpc_refusal(lambda: client.infer("other", text, headers=bearer))
        _assert_grpc(other, "model_not_allowed", "other")
        stage = _grpc_refusal(lambda: client.infer("tokenizer", text, headers=bearer))
        _assert_grpc(stage, "stage_not_callable", "tokenizer")
    finally:
        client.close()


def test_what_a_request_holds(edge: RunningEdge) -> None:
    infer = "/v2/models/embed/infer"
    bearer = {"authorization": f"Bearer {KEY}"}
    texts = {"authorization": f"Bearer {TEXTS_KEY}"}
    too_many = (str(TEXTS_RATE + 1), str(TEXTS_RATE))
    cases = [
        ("unreadable", bearer, b"[1]", ("the body must be a JSON object",)),
        ("compressed", {**bearer, "content-encoding": "gzip"}, b"{}", ()),
        ("priority", bearer, b'{"parameters":{"priority":"high"}}', ()),
        ("too_many_texts", texts, _texts(TEXTS_RATE + 1), too_many),
        ("body_too_large", bearer, b" " * (BUFFER_LIMIT_BYTES + 1), (BUFFER_MIB,)),
    ]
    for name, headers, body, words in cases:
        _assert_http(_http(edge.http_url, infer, headers, body), name, *words)
    client = grpcclient.InferenceServerClient(edge.grpc_url)
    try:
        batch = [_grpc_text(TEXTS_RATE + 1)]
        refused = _grpc_refusal(lambda: client.infer("embed", batch, headers=texts))
        _assert_grpc(refused, "too_many_texts", *too_many)
        # Over the buffer: one text a MiB longer than it.
        huge = np.array([[b"x" * (BUFFER_LIMIT_BYTES + 2**20)]], dtype=np.object_)
        tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(huge)
        refused = _grpc_refusal(lambda: client.infer("embed", [tensor], headers=bearer))
        _assert_grpc(refused, "body_too_large", BUFFER_MIB)
    finally:
        client.close()


def test_over_the_quota_and_through_tritonclient_http(edge: RunningEdge) -> None:
    """tritonclient.http reads the body's `error` as the message, as it
    reads Triton's own errors; the client library then classes it."""
    client = httpclient.InferenceServerClient(edge.http_url)
    batch = np.array([[b"a text"]], dtype=np.object_)
    tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(batch)
    bearer = {"authorization": f"Bearer {SLOW_KEY}"}
    refusals: list[InferenceServerException] = []
    try:
        for _ in range(SLOW_RATE + 5):
            try:
                client.infer("embed", [tensor], headers=bearer)
            except InferenceServerException as error:
                refusals.append(error)
                break
    finally:
        client.close()
    (refused,) = refusals
    assert (refused.status(), refused.message()) == ("429", REFUSALS["requests_quota"].message())
    assert isinstance(from_triton(refused), UnavailableError)


def test_a_triton_the_edge_cannot_reach(tmp_path: Path) -> None:
    http_port, grpc_port, metrics_port = free_loopback_ports(3)
    nothing = Endpoints("127.0.0.1", http_port, grpc_port, metrics_port)
    with edge_for_tenants(nothing, tenant_toml("search", [KEY], ["embed"]), tmp_path) as edge:
        bearer = {"authorization": f"Bearer {KEY}"}
        status, content_type, body = _http(edge.http_url, "/v2/models/embed/infer", bearer, b"{}")
        reply = json.loads(body)
        unreachable = REFUSALS["unreachable"]
        assert (status, content_type) == (unreachable.http_status, "application/json"), body
        assert reply[KIND_MEMBER] == unreachable.kind
        assert reply[MESSAGE_MEMBER].startswith(unreachable.message("")), reply
        client = grpcclient.InferenceServerClient(edge.grpc_url)
        try:
            code, message = _grpc_refusal(
                lambda: client.infer("embed", [_grpc_text(1)], headers=bearer)
            )
        finally:
            client.close()
        assert code == GRPC_CODES[unreachable.grpc_status]
        assert message.startswith(unreachable.message("")), message
