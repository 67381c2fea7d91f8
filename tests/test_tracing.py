"""Traces (server/tracing.py: the launcher's --otlp-endpoint and
--trace-sampling) from a real tritonserver behind the edge to a real Jaeger
(build/tools/bin/jaeger, from scripts/install_jaeger.sh): a request that
carries a W3C traceparent, over HTTP or gRPC, comes back from Jaeger as one
trace joined to the caller's span, with a span per model of the ensemble and
their queue and compute times; the edge passes the context on unchanged, and
the gateway passes its caller's on and answers the trace id; a traceparent
Triton cannot read, or a collector that is down, fails and slows no request;
of the other requests one in round(1/ratio) is traced; a sampling ratio
outside 0..1 is refused at start. Without Jaeger the tests that need it
skip, saying so."""

from __future__ import annotations

import argparse
import http.server
import json
import secrets
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import grpc
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml
from embedding_client.gateway.trace_context import TRACE_ID_HEADER, read_trace_context
from tritonclient.grpc import service_pb2, service_pb2_grpc

from harness.edge import RunningEdge, running_edge, tenant_toml
from harness.gateway import RunningGateway, running_gateway
from harness.jaeger import JAEGER, RunningJaeger, Span, Trace, running_jaeger
from harness.ports import free_loopback_port
from harness.requests import text_inputs
from harness.server import RunningServer, free_loopback_endpoints, running_server
from server.launch import Endpoints, argument_parser, server_command, wheel_triton
from server.paths import REPO_ROOT, TOKENIZER_JSON
from server.tracing import (
    DEFAULT_SAMPLING,
    DEFAULT_SERVICE_NAME,
    ENDPOINT_VARIABLE,
    SAMPLING_VARIABLE,
    Tracing,
    add_tracing_arguments,
    tracing_from_arguments,
    triton_rate,
)

KEY = "tracing-key"
STAGES = ("tokenizer", "embedder", "serializer")
# Triton exports every 5 s (its batch span processor's schedule delay);
# a trace is complete once its last batch is in.
TRACE_TIMEOUT_S = 30.0
# Long enough for the server's batch span processor to try an export (every
# 5 s) while the requests are timed.
UNREACHABLE_RUN_S = 12.0
# Span times come from one clock (Triton's), rounded to microseconds by Jaeger.
NESTING_SLACK_US = 2
TRACE_CONFIG = "--trace-config="


@dataclass(frozen=True)
class Caller:
    """A caller's span, as the W3C trace context headers carry it."""

    trace_id: str
    span_id: str
    flags: str = "01"

    @classmethod
    def new(cls, flags: str = "01") -> Caller:
        return cls(secrets.token_hex(16), secrets.token_hex(8), flags)

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningJaeger]:
    if not JAEGER.exists():
        pytest.skip(f"{JAEGER} is missing: scripts/setup.sh builds it (install_jaeger.sh)")
    with running_jaeger(tmp_path_factory.mktemp("jaeger")) as running:
        yield running


@pytest.fixture(scope="module")
def server(
    jaeger: RunningJaeger, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    # Every request traced: a request without a usable context then starts
    # a trace of its own, which the tests find by its request id.
    log_path = tmp_path_factory.mktemp("traced") / "tritonserver.log"
    arguments = [f"--otlp-endpoint={jaeger.otlp_endpoint}", "--trace-sampling=1"]
    with running_server(log_path, extra_args=arguments) as running:
        yield running


@pytest.fixture(scope="module")
def edge(server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEdge]:
    workdir = tmp_path_factory.mktemp("edge")
    path = workdir / "tenants.toml"
    path.write_text(tenant_toml("tracer", [KEY], ["embed"]))
    with running_edge(server.endpoints, path, workdir / "state") as running:
        yield running


def infer(module: ModuleType, url: str, headers: dict[str, str], request_id: str = "") -> None:
    """One `embed` request with these headers (HTTP) or metadata (gRPC)."""
    client = module.InferenceServerClient(url)
    try:
        result = client.infer(
            "embed",
            text_inputs(module, ["a traced text", "and another"]),
            headers=headers,
            request_id=request_id,
        )
    finally:
        client.close()
    assert result.as_numpy("EMBEDDING").shape == (2, 384 * 4)


def through_edge(
    module: ModuleType, edge: RunningEdge, context: dict[str, str], request_id: str = ""
) -> None:
    url = edge.http_url if module is httpclient else edge.grpc_url
    infer(module, url, {"authorization": f"Bearer {KEY}", **context}, request_id)


class _RecordingTriton(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Stands in for Triton's gRPC port: answers ModelInfer empty and keeps
    each request's metadata."""

    def __init__(self) -> None:
        self.metadata: list[dict[str, str]] = []

    def ModelInfer(  # the gRPC method's name
        self, request: service_pb2.ModelInferRequest, context: grpc.ServicerContext
    ) -> service_pb2.ModelInferResponse:
        self.metadata.append({key: value for key, value in context.invocation_metadata()})
        return service_pb2.ModelInferResponse(model_name=request.model_name, id=request.id)


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    """Stands in for Triton's HTTP port: answers an inference empty and
    keeps each request's headers."""

    seen: list[dict[str, str]] = []

    def do_POST(self) -> None:  # http.server's name
        self.rfile.read(int(self.headers.get("content-length", "0")))
        type(self).seen.append({key.lower(): value for key, value in self.headers.items()})
        body = b'{"model_name":"embed","outputs":[]}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_edge_passes_the_trace_context_on_unchanged(tmp_path: Path) -> None:
    """What Triton is sent through the edge, seen where Triton would be:
    Triton 2.51's gRPC frontend reads the traceparent but not the
    tracestate, so Jaeger alone could not show the edge keeps it."""
    grpc_server = grpc.server(ThreadPoolExecutor(max_workers=2))
    recorder = _RecordingTriton()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(recorder, grpc_server)
    grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RecordingHandler)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    _RecordingHandler.seen = []
    context = {
        "traceparent": Caller.new().traceparent,
        "tracestate": "caller=1,other=two words",
    }
    path = tmp_path / "tenants.toml"
    path.write_text(tenant_toml("tracer", [KEY], ["embed"]))
    fake = Endpoints("127.0.0.1", http_server.server_address[1], grpc_port, 0)
    try:
        with running_edge(fake, path, tmp_path / "state") as edge:
            for module in (grpcclient, httpclient):
                url = edge.http_url if module is httpclient else edge.grpc_url
                client = module.InferenceServerClient(url)
                try:
                    client.infer(
                        "embed",
                        text_inputs(module, ["a traced text"]),
                        headers={"authorization": f"Bearer {KEY}", **context},
                    )
                finally:
                    client.close()
    finally:
        http_server.shutdown()
        http_server.server_close()
        grpc_server.stop(None)
    for seen in (*recorder.metadata, *_RecordingHandler.seen):
        assert {name: seen.get(name) for name in context} == context, seen
    assert len(recorder.metadata) == len(_RecordingHandler.seen) == 1


def complete(trace: Trace) -> bool:
    """Every span of an `embed` request is in: Triton's own root, the
    ensemble, each stage and each stage's compute."""
    names = [span.name for span in trace.spans]
    return all(names.count(name) >= 1 for name in ("InferRequest", "embed", *STAGES)) and (
        names.count("compute") >= len(STAGES)
    )


def within(child: Span, parent: Span) -> bool:
    return (
        child.start_us >= parent.start_us - NESTING_SLACK_US
        and child.end_us <= parent.end_us + NESTING_SLACK_US
    )


def check_embed_trace(
    trace: Trace, caller: Caller, protocol: str, tracestate: str | None = None
) -> None:
    """One request, one trace: Triton's root span is a child of the
    caller's, the ensemble of the root, each stage of the ensemble, and
    each stage's compute of the stage, each inside its parent's time;
    `tracestate`, where given, is every span's."""
    assert trace.trace_id == caller.trace_id
    assert trace.service_names == {DEFAULT_SERVICE_NAME}
    (root,) = trace.named("InferRequest")
    assert root.parent_id == caller.span_id
    if tracestate is not None:
        states = {span.tags.get("w3c.tracestate") for span in trace.spans}
        assert states == {tracestate}, states
    events = [name for name, _ in root.events]
    assert any(name.startswith(protocol) for name in events), events
    (ensemble,) = trace.named("embed")
    assert ensemble.parent_id == root.span_id and within(ensemble, root)
    assert ensemble.tags["triton.model_name"] == "embed"
    for stage in STAGES:
        (span,) = trace.named(stage)
        assert span.parent_id == ensemble.span_id, (stage, span, ensemble)
        assert within(span, ensemble), stage
        assert span.tags["triton.model_name"] == stage
        (compute,) = [child for child in trace.children(span) if child.name == "compute"]
        assert within(compute, span), stage
        # Queue: from the request's arrival in the stage's queue to the
        # start of its execution; compute: the execution, its input and
        # output copies marked.
        queued_us = span.event_us("QUEUE_START")
        started_us = compute.event_us("COMPUTE_START")
        assert span.start_us - NESTING_SLACK_US <= queued_us <= started_us + NESTING_SLACK_US
        input_end = compute.event_us("COMPUTE_INPUT_END")
        output_start = compute.event_us("COMPUTE_OUTPUT_START")
        assert started_us <= input_end <= output_start <= compute.event_us("COMPUTE_END")
        assert compute.duration_us > 0
    # Nothing else: no second root, no span of another request.
    assert len(trace.spans) == 2 + 2 * len(STAGES), [span.name for span in trace.spans]


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_request_through_the_edge_is_one_trace_under_the_callers_span(
    module: ModuleType, edge: RunningEdge, jaeger: RunningJaeger
) -> None:
    caller = Caller.new()
    tracestate = "caller=1,other=two"
    through_edge(module, edge, {"traceparent": caller.traceparent, "tracestate": tracestate})
    trace = jaeger.wait_for(lambda: jaeger.trace(caller.trace_id), complete, TRACE_TIMEOUT_S)
    # Triton 2.51 reads a tracestate from HTTP headers only, not from gRPC
    # metadata (test_the_edge_passes_the_trace_context_on_unchanged).
    if module is httpclient:
        check_embed_trace(trace, caller, "HTTP", tracestate)
    else:
        check_embed_trace(trace, caller, "GRPC")


def test_a_context_is_traced_whatever_its_sampled_flag(
    edge: RunningEdge, jaeger: RunningJaeger
) -> None:
    """Triton traces every request that carries a valid context, whatever
    the caller decided: its tracer samples every span it starts
    (server/tracing.py)."""
    caller = Caller.new(flags="00")
    through_edge(httpclient, edge, {"traceparent": caller.traceparent})
    trace = jaeger.wait_for(lambda: jaeger.trace(caller.trace_id), complete, TRACE_TIMEOUT_S)
    check_embed_trace(trace, caller, "HTTP")


def _malformed(caller: Caller) -> dict[str, str]:
    """traceparent values the W3C grammar refuses, one per way to break it."""
    t, s = caller.trace_id, caller.span_id
    return {
        "garbage": "not a traceparent",
        "zero-span": f"00-{t}-{'0' * 16}-01",
        "zero-trace": f"00-{'0' * 32}-{s}-01",
        "no-flags": f"00-{t}-{s}",
        "version-ff": f"ff-{t}-{s}-01",
        "short-trace": f"00-{t[:-2]}-{s}-01",
    }


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_malformed_traceparent_fails_nothing_and_starts_its_own_trace(
    module: ModuleType, edge: RunningEdge, jaeger: RunningJaeger
) -> None:
    caller = Caller.new()
    cases = _malformed(caller)
    request_ids = {case: f"malformed-{case}-{secrets.token_hex(4)}" for case in cases}
    for case, value in cases.items():
        through_edge(module, edge, {"traceparent": value}, request_ids[case])
    for case, request_id in request_ids.items():

        def found(request_id: str = request_id) -> Trace | None:
            traces = jaeger.find_traces(DEFAULT_SERVICE_NAME, {"triton.request_id": request_id})
            return traces[0] if len(traces) == 1 else None

        trace = jaeger.wait_for(found, complete, TRACE_TIMEOUT_S)
        assert trace.trace_id != caller.trace_id, case
        (root,) = trace.named("InferRequest")
        assert root.parent_id is None, case
    assert jaeger.trace(caller.trace_id) is None


def _timed_infer(url: str, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    infer(httpclient, url, headers)
    return time.perf_counter() - started


def test_an_unreachable_collector_slows_and_fails_no_request(
    server: RunningServer, tmp_path: Path
) -> None:
    """Against a closed port, every request traced: the same requests,
    alternated with the server whose collector answers, take about as
    long."""
    closed = free_loopback_port()
    arguments = [f"--otlp-endpoint=http://127.0.0.1:{closed}", "--trace-sampling=1"]
    with running_server(tmp_path / "tritonserver.log", extra_args=arguments) as unreachable:
        infer(httpclient, unreachable.http_url, {})  # warm-up: the first request loads
        infer(httpclient, server.http_url, {})
        reachable_s: list[float] = []
        unreachable_s: list[float] = []
        deadline = time.monotonic() + UNREACHABLE_RUN_S
        while time.monotonic() < deadline:
            caller = Caller.new()
            headers = {"traceparent": caller.traceparent}
            reachable_s.append(_timed_infer(server.http_url, headers))
            unreachable_s.append(_timed_infer(unreachable.http_url, headers))
        log = unreachable.log_path.read_text(errors="replace")
    median, baseline = statistics.median(unreachable_s), statistics.median(reachable_s)
    assert median <= 2 * baseline, (median, baseline)
    p90, baseline_p90 = _p90(unreachable_s), _p90(reachable_s)
    assert p90 <= 3 * baseline_p90, (p90, baseline_p90)
    # The exports were tried, and failed, while the requests were timed.
    assert "[OTLP HTTP Client]" in log and "connection failed" in log, log[-4000:]


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


@pytest.mark.parametrize(("ratio", "traced"), [("0", [False] * 4), ("0.5", [False, True] * 2)])
def test_of_the_requests_without_a_context_one_in_n_is_traced(
    ratio: str, traced: list[bool], jaeger: RunningJaeger, tmp_path: Path
) -> None:
    """Triton counts requests (it draws nothing): at 0.5 the 2nd and 4th
    of a fresh server's requests are traced, at 0 none; a request with a
    context is traced at any ratio."""
    arguments = [f"--otlp-endpoint={jaeger.otlp_endpoint}", f"--trace-sampling={ratio}"]
    request_ids = [f"sampled-{ratio}-{n}-{secrets.token_hex(4)}" for n in range(len(traced))]
    caller = Caller.new()
    with running_server(tmp_path / "tritonserver.log", extra_args=arguments) as server:
        for request_id in request_ids:
            infer(httpclient, server.http_url, {}, request_id)
        # Exported after those above (one queue, in order): once its trace
        # is in, theirs are too, where there are any.
        infer(httpclient, server.http_url, {"traceparent": caller.traceparent})
        check_embed_trace(
            jaeger.wait_for(lambda: jaeger.trace(caller.trace_id), complete, TRACE_TIMEOUT_S),
            caller,
            "HTTP",
        )
    found = [
        len(jaeger.find_traces(DEFAULT_SERVICE_NAME, {"triton.request_id": request_id})) == 1
        for request_id in request_ids
    ]
    assert found == traced


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1.5", "1.5 is outside 0..1"),
        ("-0.1", "-0.1 is outside 0..1"),
        ("abc", "'abc' is not a number"),
        ("nan", "nan is outside 0..1"),
    ],
)
def test_a_sampling_ratio_outside_0_to_1_is_refused_at_start(value: str, message: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "server.launch",
            "--otlp-endpoint=http://127.0.0.1:4318",
            f"--trace-sampling={value}",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "argument --trace-sampling" in done.stderr and message in done.stderr, done.stderr


@pytest.mark.parametrize(
    "value",
    [
        "localhost:4318",
        "grpc://localhost:4317",
        "http://",
        "http://host:99999",
        "http://h:4318/v1/traces",
    ],
)
def test_an_otlp_endpoint_that_is_no_http_base_address_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        argument_parser().parse_args([f"--otlp-endpoint={value}"])
    assert exited.value.code == 2
    assert "argument --otlp-endpoint" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("ratio", "rate"), [(1.0, 1), (0.5, 2), (0.3, 3), (0.01, 100), (0.0, 0), (1e-12, 2**32 - 1)]
)
def test_a_ratio_is_served_as_one_in_n_requests(ratio: float, rate: int) -> None:
    assert triton_rate(ratio) == rate


def test_the_trace_settings_on_tritonserver_command_line() -> None:
    endpoints = free_loopback_endpoints()
    args = argument_parser().parse_args(
        ["--otlp-endpoint=http://collector:4318/", "--trace-sampling=0.25"]
    )
    command = server_command(wheel_triton(), endpoints, tracing=tracing_from_arguments(args))
    settings = [part.removeprefix(TRACE_CONFIG) for part in command if TRACE_CONFIG in part]
    assert settings == [
        "mode=opentelemetry",
        "opentelemetry,url=http://collector:4318/v1/traces",
        f"opentelemetry,resource=service.name={DEFAULT_SERVICE_NAME}",
        "rate=4",
        "level=TIMESTAMPS",
        "count=-1",
    ]
    # Without an endpoint nothing changes, whatever the ratio.
    untraced = argument_parser().parse_args(["--trace-sampling=0.25"])
    assert tracing_from_arguments(untraced) is None
    command = server_command(wheel_triton(), endpoints, tracing=tracing_from_arguments(untraced))
    assert not any(TRACE_CONFIG in part for part in command)


def _post_embeddings(gateway: RunningGateway, headers: dict[str, str]) -> tuple[int, str | None]:
    """The status and x-trace-id of one /v1/embeddings request."""
    body = json.dumps({"model": "embed", "input": ["a traced text"]}).encode()
    request = urllib.request.Request(
        f"{gateway.base_url}/embeddings",
        data=body,
        headers={"content-type": "application/json", "authorization": f"Bearer {KEY}", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.headers.get(TRACE_ID_HEADER)
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get(TRACE_ID_HEADER)


def test_the_gateway_passes_the_callers_context_on_and_answers_its_trace_id(
    edge: RunningEdge, jaeger: RunningJaeger, tmp_path: Path
) -> None:
    """Gateway, edge, Triton: the gateway tokenizes, so its ids go to
    `embed_tokens`, whose spans join the caller's trace."""
    caller = Caller.new()
    with running_gateway(
        edge.grpc_url,
        [("embed", TOKENIZER_JSON)],
        tmp_path / "gateway.log",
        extra_args=("--forward-api-key",),
    ) as gateway:
        context = {"traceparent": caller.traceparent, "tracestate": "caller=1"}
        assert _post_embeddings(gateway, context) == (200, caller.trace_id)
        assert _post_embeddings(gateway, {}) == (200, None)
        assert _post_embeddings(gateway, {"traceparent": "not a traceparent"}) == (200, None)

    def tokens_complete(trace: Trace) -> bool:
        names = [span.name for span in trace.spans]
        return {"InferRequest", "embed_tokens", "embedder", "serializer"} <= set(names) and (
            names.count("compute") >= 2
        )

    trace = jaeger.wait_for(lambda: jaeger.trace(caller.trace_id), tokens_complete, TRACE_TIMEOUT_S)
    (root,) = trace.named("InferRequest")
    assert root.parent_id == caller.span_id
    assert root.tags.get("w3c.tracestate") == "caller=1"
    (ensemble,) = trace.named("embed_tokens")
    assert ensemble.parent_id == root.span_id
    for stage in ("embedder", "serializer"):
        (span,) = trace.named(stage)
        assert span.parent_id == ensemble.span_id


@pytest.mark.parametrize(
    ("headers", "trace_id"),
    [
        ({"traceparent": f"00-{'a' * 32}-{'b' * 16}-01"}, "a" * 32),
        ({"traceparent": f"00-{'a' * 32}-{'b' * 16}-00", "tracestate": "k=v"}, "a" * 32),
        # A later version may add fields; version 00 may not.
        ({"traceparent": f"01-{'a' * 32}-{'b' * 16}-01-more"}, "a" * 32),
        ({"traceparent": f"00-{'a' * 32}-{'b' * 16}-01-more"}, None),
        ({"traceparent": f"ff-{'a' * 32}-{'b' * 16}-01"}, None),
        ({"traceparent": f"00-{'0' * 32}-{'b' * 16}-01"}, None),
        ({"traceparent": f"00-{'a' * 32}-{'0' * 16}-01"}, None),
        ({"traceparent": f"00-{'A' * 32}-{'b' * 16}-01"}, None),
        ({"tracestate": "k=v"}, None),
        ({}, None),
    ],
)
def test_the_gateway_reads_only_a_valid_traceparent(
    headers: dict[str, str], trace_id: str | None
) -> None:
    context = read_trace_context(headers)
    assert (context.trace_id if context else None) == trace_id
    if context is not None:
        assert context.headers() == headers


def _parsed(environment: dict[str, str], arguments: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_tracing_arguments(parser, environment)
    return parser.parse_args(arguments)


def test_the_environment_gives_the_defaults_and_an_argument_wins() -> None:
    set_ = {ENDPOINT_VARIABLE: "http://collector:4318", SAMPLING_VARIABLE: "0.5"}
    assert tracing_from_arguments(_parsed(set_, [])) == Tracing("http://collector:4318", 0.5)
    assert tracing_from_arguments(_parsed(set_, ["--trace-sampling=1"])) == Tracing(
        "http://collector:4318", 1.0
    )
    # Empty is unset (compose passes an unset variable through as "").
    unset = _parsed({ENDPOINT_VARIABLE: "", SAMPLING_VARIABLE: ""}, [])
    assert tracing_from_arguments(unset) is None
    assert unset.trace_sampling == DEFAULT_SAMPLING


def test_a_bad_value_in_the_environment_is_refused_as_the_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        _parsed({SAMPLING_VARIABLE: "1.5"}, [])
    assert exited.value.code == 2
    assert "argument --trace-sampling: 1.5 is outside 0..1" in capsys.readouterr().err


def test_compose_hands_the_trace_settings_to_every_launcher() -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    for name in ("triton", "triton-cpu"):
        environment = compose["services"][name]["environment"]
        for variable in (ENDPOINT_VARIABLE, SAMPLING_VARIABLE):
            assert environment[variable] == f"${{{variable}:-}}", (name, variable)
