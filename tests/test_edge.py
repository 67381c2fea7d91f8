"""The edge (server/edge: Envoy enforcing the tenants file) in front of a real
tritonserver, over gRPC and HTTP: refusals never reach Triton, a tenant in
its quota gets embeddings, the tenant's priority replaces the client's, and
a changed file is applied (or refused) without failing a request."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from harness.edge import RunningEdge, edge_command, running_edge, tenant_toml
from harness.gateway import RunningGateway, running_gateway
from harness.logs import first_index
from harness.priority import BULK, INTERACTIVE
from harness.repository import repository_variant
from harness.server import RunningServer, running_server
from server.edge import TenantsWatcher
from server.edge.refusals import REFUSALS, refusal_message
from server.paths import REPO_ROOT, TOKENIZER_JSON
from server.shutdown_timings import EXIT_TIMEOUT_S

SEARCH_KEY = "search-key"
INDEXER_KEY = "indexer-key"
SLOW_KEY = "slow-key"
NARROW_KEY = "narrow-key"
LONG_BATCH = ["a long text " * 40] * 64
# SHA-256 pads to 64-byte blocks: lengths on each side of the 55/56 and
# 64 boundaries, so the edge's Lua SHA-256 is checked where it can break.
ODD_KEYS = ["k" * n for n in (1, 55, 56, 63, 64, 119, 120, 200)]
SLOW_RATE = 2
TEXTS_KEY = "texts-key"
TEXTS_RATE = 8
REQUESTS_QUOTA_MESSAGE = refusal_message("requests_quota")
TEXTS_QUOTA_MESSAGE = refusal_message("texts_quota")


def _bulk_expires_at_once(config: model_config_pb2.ModelConfig) -> None:
    # An observable priority: a request Triton queues at the bulk level
    # expires at once (1 us in the queue), an interactive one is served.
    policy = config.dynamic_batching.priority_queue_policy[BULK]
    policy.default_timeout_microseconds = 1
    policy.allow_timeout_override = False


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("edge_triton")
    repository = repository_variant(
        workdir / "model_repository", {"tokenizer": _bulk_expires_at_once}
    )
    with running_server(workdir / "tritonserver.log", [repository]) as running:
        yield running


def tenants_text(extra: str = "") -> str:
    return (
        tenant_toml("search", [SEARCH_KEY, *ODD_KEYS], ["embed"])
        + tenant_toml("indexer", [INDEXER_KEY], ["embed"], priority="bulk")
        + tenant_toml("slow", [SLOW_KEY], ["embed"], rate=SLOW_RATE)
        + tenant_toml("narrow", [NARROW_KEY], ["embed"], in_flight=1)
        + tenant_toml("texts", [TEXTS_KEY], ["embed"], texts_rate=TEXTS_RATE)
        + extra
    )


@pytest.fixture(scope="module")
def edge(server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEdge]:
    workdir = tmp_path_factory.mktemp("edge")
    path = workdir / "tenants.toml"
    path.write_text(tenants_text())
    with running_edge(server.endpoints, path, workdir / "state") as running:
        yield running


@pytest.fixture(autouse=True)
def original_tenants(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test starts from the module's tenants file, whatever the last one left."""
    yield
    if "edge" in request.fixturenames:
        running: RunningEdge = request.getfixturevalue("edge")
        if running.tenants_path.read_text() != tenants_text():
            running.tenants_path.write_text(tenants_text())
            assert running.reload() is None


def text_input(texts: list[str], module: object = grpcclient) -> object:
    batch = np.array([[t.encode()] for t in texts], dtype=np.object_)
    tensor = module.InferInput("TEXT", list(batch.shape), "BYTES")  # type: ignore[attr-defined]
    tensor.set_data_from_numpy(batch)
    return tensor


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def grpc_infer(
    url: str, key: str | None, model: str = "embed", **options: object
) -> grpcclient.InferResult:
    client = grpcclient.InferenceServerClient(url)
    try:
        return client.infer(
            model,
            [text_input(["a tenant's text"])],
            headers=bearer(key) if key else None,
            **options,
        )
    finally:
        client.close()


def grpc_status(url: str, key: str | None, model: str = "embed", **options: object) -> str:
    try:
        grpc_infer(url, key, model, **options)
    except InferenceServerException as error:
        return str(error.status())
    return "OK"


def http_request(
    url: str,
    path: str,
    headers: list[tuple[str, str]],
    body: dict[str, object] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request with exactly these headers (repeats included)."""
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    data = json.dumps(body).encode() if body is not None else b""
    connection.putrequest("POST" if body is not None else "GET", path)
    for name, value in [*headers, ("content-length", str(len(data)))]:
        connection.putheader(name, value)
    connection.endheaders(data)
    reply = connection.getresponse()
    result = reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
    connection.close()
    return result


def infer_body(priority: int | None = None) -> dict[str, object]:
    body: dict[str, object] = {
        "inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["hello"]}],
        "parameters": {"dtype": "float32"},
    }
    if priority is not None:
        body["parameters"] = {"priority": priority, "dtype": "float32"}
    return body


def embed_counts(server: RunningServer) -> int:
    """Every request `embed` saw at Triton, answered or failed."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        stats = client.get_inference_statistics("embed", as_json=True)
    finally:
        client.close()
    (model,) = stats["model_stats"]
    success = int(model["inference_stats"].get("success", {}).get("count", 0))
    fail = int(model["inference_stats"].get("fail", {}).get("count", 0))
    return success + fail


# gRPC ------------------------------------------------------------------------


def test_grpc_tenant_gets_embeddings(edge: RunningEdge) -> None:
    rows = grpc_infer(edge.grpc_url, SEARCH_KEY).as_numpy("EMBEDDING")
    vector = np.frombuffer(rows.tobytes(), "<f4")
    assert vector.shape == (384,) and abs(float(np.linalg.norm(vector)) - 1) < 1e-3


def test_grpc_refusals(edge: RunningEdge, server: RunningServer) -> None:
    before = embed_counts(server)
    assert grpc_status(edge.grpc_url, None) == "StatusCode.UNAUTHENTICATED"
    assert grpc_status(edge.grpc_url, "wrong-key") == "StatusCode.UNAUTHENTICATED"
    assert (
        grpc_status(edge.grpc_url, SEARCH_KEY, model="embedder") == "StatusCode.PERMISSION_DENIED"
    )
    with grpc.insecure_channel(edge.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        ready = service_pb2.ModelReadyRequest(name="embed")
        twice = [("authorization", f"Bearer {SEARCH_KEY}")] * 2
        empty = [("authorization", "Bearer ")]
        for metadata in (twice, empty):
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelReady(ready, metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # The model's token entry point comes with it; the repository API never.
        assert stub.ModelReady(
            service_pb2.ModelReadyRequest(name="embed_tokens"), metadata=bearer(SEARCH_KEY).items()
        ).ready
        with pytest.raises(grpc.RpcError) as refused:
            stub.RepositoryIndex(
                service_pb2.RepositoryIndexRequest(), metadata=bearer(SEARCH_KEY).items()
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert embed_counts(server) == before


def test_grpc_rate_limit(edge: RunningEdge, server: RunningServer) -> None:
    time.sleep(1.1)  # a full bucket
    statuses = [grpc_status(edge.grpc_url, SLOW_KEY) for _ in range(SLOW_RATE + 3)]
    assert statuses[:SLOW_RATE] == ["OK"] * SLOW_RATE
    assert set(statuses[SLOW_RATE:]) == {"StatusCode.RESOURCE_EXHAUSTED"}
    counted = embed_counts(server)
    assert grpc_status(edge.grpc_url, SLOW_KEY) == "StatusCode.RESOURCE_EXHAUSTED"
    assert embed_counts(server) == counted


def test_grpc_priority_is_the_tenants(edge: RunningEdge, server: RunningServer) -> None:
    # The observable is real: Triton expires a bulk request at once here.
    assert grpc_status(server.grpc_url, None, priority=BULK) == "StatusCode.UNAVAILABLE"
    assert grpc_status(server.grpc_url, None, priority=INTERACTIVE) == "OK"
    # Through the edge, the tenant's level holds whatever the client asks.
    assert grpc_status(edge.grpc_url, INDEXER_KEY, priority=INTERACTIVE) == "StatusCode.UNAVAILABLE"
    assert grpc_status(edge.grpc_url, INDEXER_KEY) == "StatusCode.UNAVAILABLE"
    assert grpc_status(edge.grpc_url, SEARCH_KEY, priority=BULK) == "OK"


def test_every_key_length_authenticates(edge: RunningEdge) -> None:
    for key in ODD_KEYS:
        status, _, _ = http_request(
            edge.http_url, "/v2/models/embed/ready", list(bearer(key).items())
        )
        assert status == 200, len(key)
        status, _, _ = http_request(
            edge.http_url, "/v2/models/embed/ready", [("authorization", f"Bearer {key}x")]
        )
        assert status == 401, len(key)


# HTTP ------------------------------------------------------------------------


def test_http_tenant_gets_embeddings(edge: RunningEdge) -> None:
    client = httpclient.InferenceServerClient(edge.http_url)
    try:
        result = client.infer(
            "embed", [text_input(["a tenant's text"], httpclient)], headers=bearer(SEARCH_KEY)
        )
    finally:
        client.close()
    assert result.as_numpy("EMBEDDING").shape == (1, 384 * 4)


def test_http_refusals(edge: RunningEdge, server: RunningServer) -> None:
    before = embed_counts(server)
    infer = "/v2/models/embed/infer"
    key = ("authorization", f"Bearer {SEARCH_KEY}")
    cases = [
        ([], infer, 401),
        ([("authorization", "Bearer wrong-key")], infer, 401),
        ([key, key], infer, 401),
        ([("authorization", "Bearer ")], infer, 401),
        ([("authorization", SEARCH_KEY)], infer, 401),
        ([], f"{infer}?key={SEARCH_KEY}", 400),
        ([key], f"{infer}?key={SEARCH_KEY}", 400),
        ([key], "/v2/models/embedder/infer", 403),
        ([key], "/v2/models/embed/../embedder/infer", 403),
        ([key], "/v2/repository/index", 403),
        ([key, ("x-tenant", "indexer")], "/v2/models/embedder/infer", 403),
    ]
    for headers, path, expected in cases:
        status, _, body = http_request(edge.http_url, path, headers, infer_body())
        assert status == expected, (headers, path, body)
    assert embed_counts(server) == before
    # Health stays open, for load balancers.
    assert http_request(edge.http_url, "/v2/health/ready", [])[0] == 200


def test_http_rate_limit_says_when_to_retry(edge: RunningEdge, server: RunningServer) -> None:
    time.sleep(1.1)
    key = [("authorization", f"Bearer {SLOW_KEY}")]
    replies = [
        http_request(edge.http_url, "/v2/models/embed/infer", key, infer_body())
        for _ in range(SLOW_RATE + 2)
    ]
    assert [status for status, _, _ in replies[:SLOW_RATE]] == [200] * SLOW_RATE
    for status, headers, body in replies[SLOW_RATE:]:
        assert status == 429 and headers["retry-after"] == "1"
        assert json.loads(body) == REFUSALS["requests_quota"].http_body()


# Texts quota -----------------------------------------------------------------

INFER = "/v2/models/embed/infer"
TEXTS_AUTH = [("authorization", f"Bearer {TEXTS_KEY}")]


def texts_body(count: int, rows: int | None = None) -> dict[str, object]:
    """`count` texts, in a TEXT input whose shape says `rows` (default: count)."""
    data = [f"text number {i}" for i in range(count)]
    shape = [count if rows is None else rows, 1]
    return {"inputs": [{"name": "TEXT", "shape": shape, "datatype": "BYTES", "data": data}]}


def grpc_texts(url: str, key: str, count: int) -> tuple[str, str]:
    """The status and message of an inference of `count` texts."""
    client = grpcclient.InferenceServerClient(url)
    try:
        texts = [f"text number {i}" for i in range(count)]
        client.infer("embed", [text_input(texts)], headers=bearer(key))
    except InferenceServerException as error:
        return str(error.status()), str(error.message())
    finally:
        client.close()
    return "OK", ""


def grpc_token_ids(url: str, key: str, rows: int) -> str:
    """The status of an inference of `rows` token-id rows (embed_tokens)."""
    ids = np.tile(np.array([[101, 7592, 2088, 102]], dtype=np.int64), (rows, 1))
    inputs = []
    for name, array in (("INPUT_IDS", ids), ("ATTENTION_MASK", np.ones_like(ids))):
        tensor = grpcclient.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    client = grpcclient.InferenceServerClient(url)
    try:
        client.infer("embed_tokens", inputs, headers=bearer(key))
    except InferenceServerException as error:
        return f"{error.status()}: {error.message()}"
    finally:
        client.close()
    return "OK"


def drain_texts(edge: RunningEdge) -> None:
    """Empties the texts tenant's bucket with one request whose shape says
    TEXTS_RATE texts while its data holds one: the edge counts the shape,
    and Triton refuses it at once, so what follows within the second finds
    the bucket empty however long inference takes on this machine."""
    status, _, body = http_request(edge.http_url, INFER, TEXTS_AUTH, texts_body(1, TEXTS_RATE))
    assert status == 400 and b"texts_per_second" not in body, body


def test_a_tenant_within_its_texts_quota_is_answered(edge: RunningEdge) -> None:
    time.sleep(1.1)  # a full bucket
    assert grpc_texts(edge.grpc_url, TEXTS_KEY, TEXTS_RATE) == ("OK", "")
    time.sleep(1.1)
    # tritonclient.http: a JSON header, then the texts as binary data.
    client = httpclient.InferenceServerClient(edge.http_url)
    try:
        texts = [f"text number {i}" for i in range(TEXTS_RATE)]
        result = client.infer("embed", [text_input(texts, httpclient)], headers=bearer(TEXTS_KEY))
    finally:
        client.close()
    assert result.as_numpy("EMBEDDING").shape == (TEXTS_RATE, 384 * 4)
    # What carries no texts (readiness, metadata) takes nothing from it.
    for _ in range(TEXTS_RATE + 1):
        assert http_request(edge.http_url, "/v2/models/embed/ready", TEXTS_AUTH)[0] == 200
    time.sleep(1.1)
    assert grpc_token_ids(edge.grpc_url, TEXTS_KEY, TEXTS_RATE) == "OK"


def test_grpc_over_the_texts_quota(edge: RunningEdge, server: RunningServer) -> None:
    time.sleep(1.1)
    drain_texts(edge)
    before = embed_counts(server)
    status, message = grpc_texts(edge.grpc_url, TEXTS_KEY, TEXTS_RATE)
    assert status == "StatusCode.RESOURCE_EXHAUSTED" and message == TEXTS_QUOTA_MESSAGE
    # The rows of INPUT_IDS count the same.
    assert grpc_token_ids(edge.grpc_url, TEXTS_KEY, TEXTS_RATE) == (
        f"StatusCode.RESOURCE_EXHAUSTED: {TEXTS_QUOTA_MESSAGE}"
    )
    assert embed_counts(server) == before


def test_http_over_the_texts_quota(edge: RunningEdge, server: RunningServer) -> None:
    time.sleep(1.1)
    drain_texts(edge)
    before = embed_counts(server)
    status, headers, body = http_request(edge.http_url, INFER, TEXTS_AUTH, texts_body(TEXTS_RATE))
    assert status == 429 and headers["retry-after"] == "1"
    assert json.loads(body) == REFUSALS["texts_quota"].http_body()
    assert embed_counts(server) == before


def test_more_texts_than_the_quota_holds_are_refused_as_too_large(
    edge: RunningEdge, server: RunningServer
) -> None:
    """They could never pass: refused as too large, not "retry later"."""
    before = embed_counts(server)
    too_many = refusal_message("too_many_texts", str(TEXTS_RATE + 1), str(TEXTS_RATE))
    assert too_many.startswith(f"input_too_large: {TEXTS_RATE + 1} texts in one request: ")
    status, message = grpc_texts(edge.grpc_url, TEXTS_KEY, TEXTS_RATE + 1)
    assert status == "StatusCode.INVALID_ARGUMENT" and message == too_many, message
    tokens = grpc_token_ids(edge.grpc_url, TEXTS_KEY, TEXTS_RATE + 1)
    assert tokens == f"StatusCode.INVALID_ARGUMENT: {too_many}", tokens
    status, _, body = http_request(edge.http_url, INFER, TEXTS_AUTH, texts_body(TEXTS_RATE + 1))
    assert status == 400 and json.loads(body)["error"] == too_many, body
    assert embed_counts(server) == before


def test_texts_the_edge_cannot_count_are_refused(edge: RunningEdge, server: RunningServer) -> None:
    before = embed_counts(server)
    text = {"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["one"]}
    cases = {
        b'{"inputs":[{"name":"TEXT","shape":[0,1],"datatype":"BYTES","data":[]}]}': "positive",
        b'{"inputs":[{"name":"TEX\\u0054","shape":[1,1],"datatype":"BYTES","data":["a"]}]}': (
            "escaped input names"
        ),
        json.dumps({"inputs": [text, text]}).encode(): "given twice",
        json.dumps({"inputs": [{**text, "name": "OTHER"}]}).encode(): "no input TEXT",
        json.dumps({"inputs": {"TEXT": text}}).encode(): "'inputs' must be an array",
    }
    for body, reason in cases.items():
        status, _, answer = _raw_request(edge.http_url, INFER, TEXTS_AUTH, body)
        assert status == 400 and reason in json.loads(answer)["error"], (body, answer)
    assert embed_counts(server) == before


def test_http_priority_is_the_tenants(edge: RunningEdge, server: RunningServer) -> None:
    infer = "/v2/models/embed/infer"
    indexer = [("authorization", f"Bearer {INDEXER_KEY}")]
    search = [("authorization", f"Bearer {SEARCH_KEY}")]
    assert http_request(server.http_url, infer, [], infer_body(BULK))[0] == 503
    assert http_request(edge.http_url, infer, indexer, infer_body(INTERACTIVE))[0] == 503
    assert http_request(edge.http_url, infer, indexer, infer_body())[0] == 503
    no_parameters = infer_body()
    del no_parameters["parameters"]
    assert http_request(edge.http_url, infer, indexer, no_parameters)[0] == 503
    assert http_request(edge.http_url, infer, search, infer_body(BULK))[0] == 200
    # What the edge cannot read safely, it refuses rather than pass on.
    escaped = b'{"parameters":{"priorit\\u0079":1},"inputs":[]}'
    assert _raw_post(edge.http_url, infer, indexer, escaped) == 400


def _raw_post(url: str, path: str, headers: list[tuple[str, str]], body: bytes) -> int:
    return _raw_request(url, path, headers, body)[0]


def _raw_request(
    url: str, path: str, headers: list[tuple[str, str]], body: bytes
) -> tuple[int, dict[str, str], bytes]:
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("POST", path, body=body, headers=dict(headers))
    reply = connection.getresponse()
    result = reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
    connection.close()
    return result


def test_http_binary_tensors_keep_working(edge: RunningEdge) -> None:
    # tritonclient.http sends BYTES as binary data after a JSON header
    # (Inference-Header-Content-Length): the edge's edit must keep both.
    client = httpclient.InferenceServerClient(edge.http_url)
    try:
        tensor = text_input(["binary"], httpclient)
        with pytest.raises(InferenceServerException) as expired:
            client.infer("embed", [tensor], headers=bearer(INDEXER_KEY), priority=INTERACTIVE)
        assert "timeout" in str(expired.value).lower()
        result = client.infer("embed", [tensor], headers=bearer(SEARCH_KEY), priority=BULK)
    finally:
        client.close()
    assert result.as_numpy("EMBEDDING").shape == (1, 384 * 4)


# Reload ----------------------------------------------------------------------


def test_reload_adds_and_revokes_keys_without_failing_in_flight(
    edge: RunningEdge,
) -> None:
    new_key = "fresh-key"
    assert grpc_status(edge.grpc_url, new_key) == "StatusCode.UNAUTHENTICATED"
    # One client, one connection, across the reload.
    client = grpcclient.InferenceServerClient(edge.grpc_url)
    results: list[str] = []

    def long_request() -> None:
        try:
            client.infer("embed", [text_input(LONG_BATCH)], headers=bearer(SEARCH_KEY))
            results.append("OK")
        except InferenceServerException as error:
            results.append(str(error))

    try:
        worker = threading.Thread(target=long_request)
        worker.start()
        time.sleep(0.05)
        text = tenants_text(tenant_toml("fresh", [new_key], ["embed"])).replace(
            tenant_toml("search", [SEARCH_KEY, *ODD_KEYS], ["embed"]),
            tenant_toml("search", ODD_KEYS, ["embed"]),
        )
        edge.tenants_path.write_text(text)
        watcher = TenantsWatcher(edge.edge, edge.tenants_path, None)
        watcher.seen = None  # the file changed since the edge read it
        message = watcher.poll()
        assert message is not None and message.startswith("tenants applied"), message
        assert worker.is_alive(), "the request was meant to be in flight across the reload"
        worker.join(timeout=60)
        assert results == ["OK"]
        with pytest.raises(InferenceServerException) as revoked:
            client.infer("embed", [text_input(["after"])], headers=bearer(SEARCH_KEY))
        assert revoked.value.status() == "StatusCode.UNAUTHENTICATED"
    finally:
        client.close()
    assert grpc_status(edge.grpc_url, new_key) == "OK"


def test_a_bad_file_is_refused_and_the_previous_stays(edge: RunningEdge) -> None:
    watcher = TenantsWatcher(edge.edge, edge.tenants_path, None)
    version = edge.edge.version
    edge.tenants_path.write_text(tenants_text(tenant_toml("search", ["other"], ["embed"])))
    message = watcher.poll()
    assert message is not None and "refused" in message and "'search' is defined twice" in message
    assert edge.edge.version == version
    assert grpc_status(edge.grpc_url, SEARCH_KEY) == "OK"


def test_edge_stats_per_tenant(edge: RunningEdge) -> None:
    assert grpc_status(edge.grpc_url, SEARCH_KEY) == "OK"
    with urllib.request.urlopen(
        f"{edge.edge.admin_url}/stats?filter=^cluster.tenant-search-grpc.upstream_rq_total$"
    ) as reply:
        line = reply.read().decode().strip()
    assert int(line.rsplit(" ", 1)[1]) >= 1


def test_in_flight_bound(edge: RunningEdge, server: RunningServer) -> None:
    """A tenant with max_in_flight = 1: of concurrent requests, those past
    the first at Triton are refused at once, at the edge."""
    before = embed_counts(server)
    statuses: list[str] = []

    def one() -> None:
        client = grpcclient.InferenceServerClient(edge.grpc_url)
        try:
            client.infer("embed", [text_input(LONG_BATCH)], headers=bearer(NARROW_KEY))
            statuses.append("OK")
        except InferenceServerException as error:
            statuses.append(str(error.status()))
        finally:
            client.close()

    workers = [threading.Thread(target=one) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert "OK" in statuses and "StatusCode.UNAVAILABLE" in statuses, statuses
    assert embed_counts(server) - before == statuses.count("OK")


def test_the_edge_command(server: RunningServer, tmp_path: Path) -> None:
    """`python -m server.edge`: refuses a bad file naming its line; serves a
    good one, follows its changes, stops on SIGTERM."""
    path = tmp_path / "tenants.toml"
    path.write_text(tenants_text().replace('priority = "bulk"', 'priority = "urgent"'))
    command, ports = edge_command(
        path, server.endpoints, tmp_path / "state", f"--catalog={REPO_ROOT / 'models.toml'}"
    )
    refused = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert f"{path}:13: tenant 'indexer': 'priority' must be one of" in refused.stderr
    path.write_text(tenants_text())
    log = tmp_path / "edge.log"
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT)
    url = f"127.0.0.1:{ports.grpc_port}"
    try:
        deadline = time.monotonic() + 30
        while first_index(log.read_text(), "edge", "serving") < 0 and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            time.sleep(0.1)
        assert grpc_status(url, SEARCH_KEY) == "OK"
        path.write_text(tenants_text(tenant_toml("fresh", ["fresh-key"], ["embed"])))
        deadline = time.monotonic() + 15
        while grpc_status(url, "fresh-key") != "OK":
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0, log.read_text()


def test_a_stop_takes_no_new_request_and_waits_for_those_in_flight(
    server: RunningServer, tmp_path: Path
) -> None:
    """Stopping, the edge closes its ports at once and waits for a request
    in flight (here one whose body is still coming) as long as it takes, up
    to the launcher's EXIT_TIMEOUT_S; then it is answered."""
    path = tmp_path / "tenants.toml"
    path.write_text(tenants_text())
    with running_edge(server.endpoints, path, tmp_path / "state") as running:
        host, port = running.http_url.split(":")
        body = json.dumps(infer_body()).encode()
        connection = http.client.HTTPConnection(host, int(port), timeout=EXIT_TIMEOUT_S)
        connection.putrequest("POST", "/v2/models/embed/infer")
        for name, value in [*bearer(SEARCH_KEY).items(), ("content-length", str(len(body)))]:
            connection.putheader(name, value)
        connection.endheaders(body[:10])
        deadline = time.monotonic() + 10
        while running.edge.requests_in_flight() == 0:
            assert time.monotonic() < deadline, "the request never reached the edge"
            time.sleep(0.05)
        stopping = threading.Thread(target=running.edge.stop, args=(EXIT_TIMEOUT_S,))
        stopping.start()
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
            except ConnectionRefusedError:
                break
            assert time.monotonic() < deadline, "the stopping edge still takes connections"
            time.sleep(0.05)
        time.sleep(1.0)
        assert stopping.is_alive(), "the stop did not wait for the request in flight"
        connection.send(body[10:])
        reply = connection.getresponse()
        assert reply.status == 200, reply.read()
        connection.close()
        stopping.join(timeout=EXIT_TIMEOUT_S)
        assert not stopping.is_alive()


def test_the_largest_request_passes_the_edge(edge: RunningEdge) -> None:
    """64 texts of the 32 KiB byte limit (2 MiB) are buffered by the edge
    and reach Triton, which refuses them for its token limit, not the edge."""
    texts = ["word " * 6553] * 64
    client = grpcclient.InferenceServerClient(edge.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.infer("embed", [text_input(texts)], headers=bearer(SEARCH_KEY))
    finally:
        client.close()
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT", refused.value
    status, _, body = http_request(
        edge.http_url,
        "/v2/models/embed/infer",
        [("authorization", f"Bearer {SEARCH_KEY}")],
        {"inputs": [{"name": "TEXT", "shape": [64, 1], "datatype": "BYTES", "data": texts}]},
    )
    assert status == 400 and b"input_too_large" in body, body[:200]


def test_http_chunked_request(edge: RunningEdge) -> None:
    host, port = edge.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    body = json.dumps(infer_body(INTERACTIVE)).encode()
    connection.request(
        "POST",
        "/v2/models/embed/infer",
        body=iter([body[:10], body[10:]]),
        headers={"authorization": f"Bearer {INDEXER_KEY}"},
        encode_chunked=True,
    )
    reply = connection.getresponse()
    # The indexer's bulk level, so Triton expired it at once.
    assert reply.status == 503, reply.read()
    connection.close()


def test_one_rate_for_both_protocols(edge: RunningEdge) -> None:
    """A tenant's requests per second hold for HTTP and gRPC together."""
    time.sleep(1.1)
    key = [("authorization", f"Bearer {SLOW_KEY}")]
    infer = "/v2/models/embed/infer"
    assert grpc_status(edge.grpc_url, SLOW_KEY) == "OK"
    assert http_request(edge.http_url, infer, key, infer_body())[0] == 200
    assert grpc_status(edge.grpc_url, SLOW_KEY) == "StatusCode.RESOURCE_EXHAUSTED"
    assert http_request(edge.http_url, infer, key, infer_body())[0] == 429


def test_a_new_key_alone_is_applied(edge: RunningEdge) -> None:
    """A change to the keys only (the clusters stay as they are)."""
    assert grpc_status(edge.grpc_url, "second-key") == "StatusCode.UNAUTHENTICATED"
    edge.tenants_path.write_text(
        tenants_text().replace(
            tenant_toml("slow", [SLOW_KEY], ["embed"], rate=SLOW_RATE),
            tenant_toml("slow", [SLOW_KEY, "second-key"], ["embed"], rate=SLOW_RATE),
        )
    )
    assert edge.reload() is None
    time.sleep(1.1)
    assert grpc_status(edge.grpc_url, "second-key") == "OK"


def _gateway_status(gateway: RunningGateway, model: str, key: str | None) -> int:
    headers = {"Content-Type": "application/json", **({} if key is None else bearer(key))}
    body = json.dumps({"model": model, "input": ["through the gateway and the edge"]}).encode()
    request = urllib.request.Request(f"{gateway.base_url}/embeddings", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            data = json.loads(reply.read())["data"]
            assert len(data[0]["embedding"]) == 384
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_gateway_forwards_each_clients_key_to_the_edge(
    edge: RunningEdge, tmp_path: Path
) -> None:
    # `embedder` is a model no tenant may call: the gateway sends its ids to
    # `embedder_tokens`, which the edge refuses before Triton.
    models = [("embed", TOKENIZER_JSON), ("embedder", TOKENIZER_JSON)]
    with running_gateway(
        edge.grpc_url, models, tmp_path / "gateway.log", extra_args=("--forward-api-key",)
    ) as gateway:
        assert _gateway_status(gateway, "embed", None) == 401
        assert _gateway_status(gateway, "embed", "not-a-key") == 401
        assert _gateway_status(gateway, "embedder", SEARCH_KEY) == 403
        assert _gateway_status(gateway, "embed", SEARCH_KEY) == 200
        time.sleep(1.1)  # a full bucket
        # Past the quota the edge refuses with RESOURCE_EXHAUSTED and retry-after 1; the
        # gateway, a client of the edge, retries after that second (embedding_client.retry)
        # before it would answer 429: the extra requests are answered, each about a second on.
        began = time.monotonic()
        statuses = [_gateway_status(gateway, "embed", SLOW_KEY) for _ in range(SLOW_RATE + 3)]
        elapsed = time.monotonic() - began
        assert statuses == [200] * (SLOW_RATE + 3), statuses
        assert elapsed >= 1.5, elapsed
