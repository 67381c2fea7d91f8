"""The client library's retries (embedding_client.retry): the policy's
bounds, backoff and budget, then against a real tritonserver whose embedder
queue holds one request (a burst is refused with UNAVAILABLE however fast
the machine), a server that refuses a bad request, and no server at all."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from embedding_client import (
    NO_RETRIES,
    AsyncEmbeddingClient,
    EmbeddingClient,
    InvalidInputError,
    RetryPolicy,
    UnavailableError,
)
from embedding_client.retry import Retrier, RetryBudget
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from harness.edge import running_edge, tenant_toml
from harness.ports import free_loopback_port
from harness.server import RunningServer

# 48 requests of 64 texts at once: far past 2 embedder instances and a queue of 1.
BURST = [f"Text {index} of a burst past the server's queues." for index in range(64 * 48)]
# Retries enough to carry the burst through: a budget that never runs dry.
PATIENT = RetryPolicy(
    max_attempts=20, max_backoff_s=1.0, deadline_s=120.0, budget_tokens=1000.0, budget_ratio=1.0
)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("max_attempts", 0),
        ("max_attempts", 2.5),
        ("max_attempts", 1000),
        ("initial_backoff_s", -0.1),
        ("max_backoff_s", 1e6),
        ("deadline_s", -1.0),
        ("budget_ratio", 2.0),
        ("budget_tokens", 0.0),
    ],
)
def test_a_negative_or_absurd_setting_is_refused_when_built(setting: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"retry setting {setting} must"):
        RetryPolicy(**{setting: value})  # type: ignore[arg-type]


def test_a_client_refuses_a_retry_that_is_no_policy() -> None:
    with pytest.raises(ValueError, match="retry must be a RetryPolicy"):
        EmbeddingClient("127.0.0.1:8001", retry=3)  # type: ignore[arg-type]


def test_the_backoff_cap_doubles_up_to_its_maximum() -> None:
    policy = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=0.5)
    assert [policy.backoff_cap_s(retry) for retry in range(1, 6)] == [0.1, 0.2, 0.4, 0.5, 0.5]


def test_the_waits_are_jittered_below_the_cap_and_stop_at_the_deadline() -> None:
    retrier = Retrier(RetryPolicy(initial_backoff_s=0.1, max_backoff_s=0.4), seed=7)
    refused = UnavailableError("queue full", "StatusCode.UNAVAILABLE")
    far = time.monotonic() + 60
    decisions = [retrier.after_refusal(refused, retry, far) for retry in (1, 2, 3, 4)]
    assert all(again for _, again in decisions), decisions
    waits = [wait for wait, _ in decisions]
    assert all(0 <= w <= c for w, c in zip(waits, (0.1, 0.2, 0.4, 0.4), strict=True)), waits
    assert len(set(waits)) == len(waits), waits  # full jitter: drawn, not fixed
    assert retrier.after_refusal(refused, 1, time.monotonic()) == (0.0, False)
    # The last attempt is not followed by another.
    assert retrier.after_refusal(refused, RetryPolicy().max_attempts, far) == (0.0, False)


@pytest.mark.parametrize(
    "status", ["StatusCode.DEADLINE_EXCEEDED", "504", "StatusCode.INTERNAL", "400"]
)
def test_only_overload_and_unreachable_are_retried(status: str) -> None:
    retrier = Retrier(RetryPolicy())
    far = time.monotonic() + 60
    assert retrier.after_refusal(UnavailableError("no", status), 1, far) == (0.0, False)
    for retryable in (
        "StatusCode.UNAVAILABLE",
        "StatusCode.RESOURCE_EXHAUSTED",
        "429",
        "503",
        None,
    ):
        # A retrier each: five refusals would spend half the default budget.
        fresh = Retrier(RetryPolicy())
        assert fresh.after_refusal(UnavailableError("busy", retryable), 1, far)[1]


def test_a_spent_budget_holds_the_refusal_back_instead_of_retrying() -> None:
    policy = RetryPolicy(max_backoff_s=0.5, budget_tokens=2, budget_ratio=0.1)
    retrier = Retrier(policy, seed=3)
    refused = UnavailableError("queue full", "StatusCode.UNAVAILABLE")
    far = time.monotonic() + 60
    assert retrier.after_refusal(refused, 1, far)[1] is False  # 2 tokens: 1 left, not over 1
    held = [retrier.after_refusal(refused, 1, far) for _ in range(20)]
    assert not any(again for _, again in held), held
    assert all(0 <= wait <= policy.max_backoff_s for wait, _ in held), held
    assert max(wait for wait, _ in held) > policy.initial_backoff_s, held


def test_the_servers_word_is_the_least_wait_and_bounded_by_the_deadline() -> None:
    retrier = Retrier(RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.02), seed=1)
    asked = UnavailableError("queue full", "StatusCode.UNAVAILABLE", retry_after_s=0.7)
    wait, again = retrier.after_refusal(asked, 1, time.monotonic() + 60)
    assert again and 0.7 <= wait <= 0.72, wait
    huge = UnavailableError("queue full", "StatusCode.UNAVAILABLE", retry_after_s=1e9)
    assert retrier.after_refusal(huge, 1, time.monotonic() + 60) == (0.0, False)


def test_the_budget_stops_retries_while_most_calls_fail_and_answers_refill_it() -> None:
    budget = RetryBudget(tokens=10, ratio=0.5)
    allowed = [budget.refused() for _ in range(8)]
    # 10 tokens: retries while more than 5 are left after the refusal's.
    assert allowed == [True] * 4 + [False] * 4, allowed
    # 2 tokens left; 8 answers bring 4 more, and a refusal leaves 5: still no retry.
    for _ in range(8):
        budget.answered()
    assert not budget.refused()
    # 3 more answers: 6.5 tokens, and a refusal leaves 5.5.
    for _ in range(3):
        budget.answered()
    assert budget.refused()


def test_without_retries_a_burst_is_refused(one_slot_server: RunningServer) -> None:
    async def burst() -> None:
        async with AsyncEmbeddingClient(
            one_slot_server.grpc_url, max_in_flight=48, retry=NO_RETRIES
        ) as client:
            await client.embed(BURST)

    with pytest.raises(UnavailableError) as caught:
        asyncio.run(burst())
    assert caught.value.status == "StatusCode.UNAVAILABLE"
    # The client closed after the refusal, with the rest of the burst answered or refused
    # first: the server is still there.
    assert one_slot_server.is_ready()
    assert one_slot_server.launcher.poll() is None


def test_with_retries_the_same_burst_is_answered_whole(one_slot_server: RunningServer) -> None:
    async def burst() -> np.ndarray:
        async with AsyncEmbeddingClient(
            one_slot_server.grpc_url, max_in_flight=48, retry=PATIENT
        ) as client:
            return await client.embed(BURST)

    rows = asyncio.run(burst())
    assert rows.shape[0] == len(BURST)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-3)
    with EmbeddingClient(one_slot_server.grpc_url, retry=NO_RETRIES) as client:
        alone = client.embed(BURST[-3:])
    np.testing.assert_allclose(rows[-3:], alone, atol=1e-3)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_sync_client_retries_over_both_protocols(
    one_slot_server: RunningServer, protocol: str
) -> None:
    url = one_slot_server.grpc_url if protocol == "grpc" else one_slot_server.http_url
    texts = BURST[: 64 * 16]
    with EmbeddingClient(url, protocol, max_in_flight=16, retry=NO_RETRIES) as client:  # type: ignore[arg-type]
        with pytest.raises(UnavailableError):
            client.embed(texts)
    with EmbeddingClient(url, protocol, max_in_flight=16, retry=PATIENT) as client:  # type: ignore[arg-type]
        rows = client.embed(texts)
    assert rows.shape[0] == len(texts)


def _failures(server: RunningServer, model: str) -> int:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        stats = client.get_inference_statistics(model, as_json=True)
    return sum(
        int(each["inference_stats"]["fail"].get("count", 0)) for each in stats["model_stats"]
    )


def _send_once(server: RunningServer, parameters: dict[str, str]) -> None:
    """One request of one text, by tritonclient itself, refused."""
    text = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"a text"]], dtype=np.object_))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException):
            client.infer("embed", [text], parameters=parameters)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_bad_request_is_sent_once(triton_server: RunningServer, protocol: str) -> None:
    """The client's call counts in Triton's failures as one request sent once by
    tritonclient does (an ensemble counts a failed request more than once)."""
    bad = {"prompt_name": "nope"}
    before = _failures(triton_server, "embed")
    _send_once(triton_server, bad)
    once = _failures(triton_server, "embed") - before
    assert once >= 1
    url = triton_server.grpc_url if protocol == "grpc" else triton_server.http_url
    with EmbeddingClient(url, protocol, retry=PATIENT) as client:  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="unknown prompt 'nope'"):
            client.embed(["a text"], **bad)  # type: ignore[arg-type]
    assert _failures(triton_server, "embed") - before == 2 * once


@pytest.fixture
def refusing_listener() -> Iterator[tuple[int, list[float]]]:
    """A loopback port that accepts each connection and closes it at once,
    noting when: what a client meets when a server's process is gone."""
    listener = socket.create_server(("127.0.0.1", 0))
    times: list[float] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            times.append(time.monotonic())
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1], times
    stop.set()
    thread.join()
    listener.close()


IN_FLIGHT = 4
# Connections one attempt may open against a server that closes each at once:
# geventhttpclient resends on a fresh connection up to its pool size (the
# client's max_in_flight) + 1 more times, aiohttp once.
CONNECTIONS_PER_ATTEMPT = {"sync": IN_FLIGHT + 2, "asyncio": 2}


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_a_dropped_connection_is_retried_with_backoff_until_the_deadline(
    refusing_listener: tuple[int, list[float]], flavor: str
) -> None:
    port, times = refusing_listener
    policy = RetryPolicy(
        max_attempts=20, initial_backoff_s=0.1, max_backoff_s=0.4, deadline_s=2.0, budget_tokens=100
    )
    url = f"127.0.0.1:{port}"

    async def embed_async() -> None:
        async with AsyncEmbeddingClient(
            url, "http", max_in_flight=IN_FLIGHT, retry=policy, timeout_s=5
        ) as client:
            await client.embed(["nobody answers"])

    began = time.monotonic()
    with pytest.raises(UnavailableError):
        if flavor == "sync":
            with EmbeddingClient(
                url, "http", max_in_flight=IN_FLIGHT, retry=policy, timeout_s=5
            ) as client:
                client.embed(["nobody answers"])
        else:
            asyncio.run(embed_async())
    elapsed = time.monotonic() - began
    # Retried with waits between the attempts: spread over most of the deadline,
    # within max_attempts, and far from the thousands of connections a loop
    # without waits would make in 2 s.
    assert len(times) >= 3 and times[-1] - times[0] >= 0.5, times
    assert len(times) <= policy.max_attempts * CONNECTIONS_PER_ATTEMPT[flavor], len(times)
    assert elapsed <= policy.deadline_s + 1.0, elapsed


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_an_unreachable_server_fails_by_the_deadline(protocol: str) -> None:
    policy = RetryPolicy(max_attempts=20, deadline_s=1.5, budget_tokens=100)
    url = f"127.0.0.1:{free_loopback_port()}"
    with EmbeddingClient(url, protocol, retry=policy, timeout_s=5) as client:  # type: ignore[arg-type]
        began = time.monotonic()
        with pytest.raises(UnavailableError):
            client.embed(["nobody listens"])
    assert time.monotonic() - began <= policy.deadline_s + 1.0


# The tenant's requests per second at the edge: a burst past it is refused with
# RESOURCE_EXHAUSTED / 429 until its bucket refills.
TENANT_RATE = 5


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_retries_wait_out_a_tenants_quota_at_the_edge(
    triton_server: RunningServer, tmp_path: Path, protocol: str
) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(tenant_toml("quoted", ["quoted-key"], ["embed"], rate=TENANT_RATE))
    calls = 3 * TENANT_RATE
    with running_edge(triton_server.endpoints, tenants, tmp_path / "edge") as edge:
        url = edge.grpc_url if protocol == "grpc" else edge.http_url
        with EmbeddingClient(url, protocol, api_key="quoted-key", retry=NO_RETRIES) as client:  # type: ignore[arg-type]
            with pytest.raises(UnavailableError) as refused:
                for _ in range(calls):
                    client.embed(["a text"])
        assert refused.value.status in ("StatusCode.RESOURCE_EXHAUSTED", "429")
        # The edge's Retry-After, in the refusal's trailers over gRPC, its header over HTTP.
        assert refused.value.retry_after_s == 1.0
        # The bucket refills whole.
        time.sleep(1.5)
        with EmbeddingClient(url, protocol, api_key="quoted-key", retry=PATIENT) as client:  # type: ignore[arg-type]
            began = time.monotonic()
            for _ in range(calls):
                assert client.embed(["a text"]).shape == (1, 384)
            elapsed = time.monotonic() - began
    # Answered whole, at about the quota's pace: the retries waited for the bucket.
    assert elapsed >= (calls - TENANT_RATE) / TENANT_RATE * 0.8, elapsed


# A policy whose own backoff (at most 0.02 s over 3 sends) cannot outlast the edge's empty
# bucket, which refills each second: its retries pass only where they wait the Retry-After.
HASTY = RetryPolicy(
    max_attempts=3,
    initial_backoff_s=0.01,
    max_backoff_s=0.02,
    deadline_s=10.0,
    budget_tokens=1000.0,
    budget_ratio=1.0,
)


def _quota_over_http_sync(url: str) -> tuple[UnavailableError, list[float]]:
    """The refusal past the tenant's quota without retries, then each call's seconds past it
    with HASTY's."""
    with EmbeddingClient(url, "http", api_key="quoted-key", retry=NO_RETRIES) as client:
        with pytest.raises(UnavailableError) as refused:
            for _ in range(3 * TENANT_RATE):
                client.embed(["a text"])
    durations = []
    with EmbeddingClient(url, "http", api_key="quoted-key", retry=HASTY) as client:
        for _ in range(2 * TENANT_RATE):
            began = time.monotonic()
            assert client.embed(["a text"]).shape == (1, 384)
            durations.append(time.monotonic() - began)
    return refused.value, durations


async def _quota_over_http_async(url: str) -> tuple[UnavailableError, list[float]]:
    """_quota_over_http_sync with the asyncio client."""
    async with AsyncEmbeddingClient(url, "http", api_key="quoted-key", retry=NO_RETRIES) as client:
        with pytest.raises(UnavailableError) as refused:
            for _ in range(3 * TENANT_RATE):
                await client.embed(["a text"])
    durations = []
    async with AsyncEmbeddingClient(url, "http", api_key="quoted-key", retry=HASTY) as client:
        for _ in range(2 * TENANT_RATE):
            began = time.monotonic()
            assert (await client.embed(["a text"])).shape == (1, 384)
            durations.append(time.monotonic() - began)
    return refused.value, durations


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_http_clients_wait_what_the_edges_retry_after_asks(
    triton_server: RunningServer, tmp_path: Path, flavor: str
) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(tenant_toml("quoted", ["quoted-key"], ["embed"], rate=TENANT_RATE))
    with running_edge(triton_server.endpoints, tenants, tmp_path / "edge") as edge:
        if flavor == "sync":
            refused, durations = _quota_over_http_sync(edge.http_url)
        else:
            refused, durations = asyncio.run(_quota_over_http_async(edge.http_url))
    assert refused.status == "429" and refused.retry_after_s == 1.0, refused
    # Twice the quota's calls, made as the bucket ran dry, find it empty at least once (a refill
    # brings one quota a second): that call was refused, waited the second asked before its
    # retry, and was answered then.
    assert max(durations) >= 1.0, durations


class _RefusingHandler(BaseHTTPRequestHandler):
    """Triton's model config for any GET, where the server's `refuse_get` is off; a 503 with
    the server's `retry_after` (None: no header) for the rest."""

    server: _RefusingServer

    def do_GET(self) -> None:
        if self.server.refuse_get:
            self._refuse()
        else:
            self._answer(200, {"name": "embed", "max_batch_size": 64})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._refuse()

    def _refuse(self) -> None:
        self._answer(503, {"error": "queue full"}, self.server.retry_after)

    def _answer(self, status: int, body: dict[str, object], retry_after: str | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Quiet: the test reads what the clients make of the answers."""


class _RefusingServer(ThreadingHTTPServer):
    daemon_threads = True
    retry_after: str | None = None
    refuse_get = False


@pytest.fixture
def refusing_server() -> Iterator[_RefusingServer]:
    server = _RefusingServer(("127.0.0.1", 0), _RefusingHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    thread.join()
    server.server_close()


def _refusal(server: _RefusingServer, flavor: str) -> UnavailableError:
    url = f"127.0.0.1:{server.server_address[1]}"

    async def embed_async() -> None:
        async with AsyncEmbeddingClient(url, "http", retry=NO_RETRIES) as client:
            await client.embed(["a text"])

    with pytest.raises(UnavailableError) as refused:
        if flavor == "sync":
            with EmbeddingClient(url, "http", retry=NO_RETRIES) as client:
                client.embed(["a text"])
        else:
            asyncio.run(embed_async())
    assert refused.value.status == "503" and "queue full" in refused.value.message
    return refused.value


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
@pytest.mark.parametrize(
    ("retry_after", "hint"),
    [
        ("2", 2.0),
        ("0", 0.0),
        ("abc", None),
        ("-1", None),
        ("1.5", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),
        (None, None),
    ],
)
def test_a_503s_retry_after_is_read_when_whole_seconds(
    refusing_server: _RefusingServer, flavor: str, retry_after: str | None, hint: float | None
) -> None:
    refusing_server.retry_after = retry_after
    assert _refusal(refusing_server, flavor).retry_after_s == hint


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_a_refused_model_config_carries_its_retry_after_too(
    refusing_server: _RefusingServer, flavor: str
) -> None:
    refusing_server.retry_after, refusing_server.refuse_get = "2", True
    assert _refusal(refusing_server, flavor).retry_after_s == 2.0


def _texts_request(count: int) -> service_pb2.ModelInferRequest:
    """Triton's gRPC request of `count` texts for `embed`, BYTES as Triton reads them (each
    length-prefixed)."""
    request = service_pb2.ModelInferRequest(model_name="embed")
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[count, 1])
    raw = b"".join(
        struct.pack("<I", len(text)) + text for text in (t.encode() for t in BURST[:count])
    )
    request.raw_input_contents.append(raw)
    return request


def test_the_edge_tells_when_to_come_back_after_triton_refused(
    one_slot_server: RunningServer, tmp_path: Path
) -> None:
    """A burst through the edge past a one-request queue: each of Triton's refusals says when
    to come back, Retry-After over HTTP and grpc-retry-pushback-ms over gRPC, as the edge's
    own quota refusals do."""
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(tenant_toml("crowd", ["crowd-key"], ["embed"], in_flight=64))
    body = json.dumps(
        {"inputs": [{"name": "TEXT", "shape": [64, 1], "datatype": "BYTES", "data": BURST[:64]}]}
    )
    with running_edge(one_slot_server.endpoints, tenants, tmp_path / "edge") as edge:
        host, port = edge.http_url.rsplit(":", 1)

        def post(_: int) -> tuple[int, str | None]:
            connection = http.client.HTTPConnection(host, int(port), timeout=60)
            connection.request(
                "POST",
                "/v2/models/embed/infer",
                body,
                {"Content-Type": "application/json", "authorization": "Bearer crowd-key"},
            )
            reply = connection.getresponse()
            reply.read()
            connection.close()
            return reply.status, reply.getheader("retry-after")

        with ThreadPoolExecutor(48) as pool:
            answers = list(pool.map(post, range(48)))
        refused = [after for status, after in answers if status == 503]
        assert refused and {status for status, _ in answers} <= {200, 503}, answers
        assert set(refused) == {"1"}, answers

        channel = grpc.insecure_channel(edge.grpc_url)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = _texts_request(64)

        def infer(_: int) -> tuple[grpc.StatusCode, str | None]:
            try:
                stub.ModelInfer(request, metadata=[("authorization", "Bearer crowd-key")])
            except grpc.RpcError as error:
                pushback = dict(error.trailing_metadata() or ()).get("grpc-retry-pushback-ms")
                return error.code(), pushback
            return grpc.StatusCode.OK, None

        with ThreadPoolExecutor(48) as pool:
            calls = list(pool.map(infer, range(48)))
        channel.close()
        pushed = [pushback for code, pushback in calls if code == grpc.StatusCode.UNAVAILABLE]
        assert pushed and {code for code, _ in calls} <= {
            grpc.StatusCode.OK,
            grpc.StatusCode.UNAVAILABLE,
        }, calls
        assert set(pushed) == {"1000"}, calls
