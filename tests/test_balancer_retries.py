"""The chart's balancer (files/envoy.yaml, with fixed endpoints) in front of
stand-ins for two Triton servers, one of which answers every inference as
a stopping tritonserver answers the requests that reach it after its
drain: gRPC status CANCELLED, the request never run. The balancer retries
them on the other server, so a rolling restart fails no request
(tests/test_scale_out.py runs that with real replicas, where it is a race)."""

from __future__ import annotations

import http.server
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from harness.helm import BalancerPorts, Endpoint, envoy_config
from harness.ports import answers_ok, free_loopback_ports, stop, wait_until_ready
from harness.scale_out.cluster import Envoy
from server.edge import find_envoy

REQUESTS = 40


class _Triton(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, cancels: bool) -> None:
        self.cancels = cancels
        self.calls = 0

    def ModelInfer(  # the gRPC method's name
        self, request: service_pb2.ModelInferRequest, context: grpc.ServicerContext
    ) -> service_pb2.ModelInferResponse:
        self.calls += 1
        if self.cancels:
            context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")
        return service_pb2.ModelInferResponse(model_name=request.model_name, id=request.id)


class _Ready(http.server.BaseHTTPRequestHandler):
    """Triton's HTTP port as the balancer's health check reads it."""

    def do_GET(self) -> None:  # http.server's name
        self.send_response(200 if self.path == "/v2/health/ready" else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass(frozen=True)
class StandIn:
    endpoint: Endpoint
    triton: _Triton


@contextmanager
def stand_in(cancels: bool) -> Iterator[StandIn]:
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    triton = _Triton(cancels)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(triton, server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    ready = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    threading.Thread(target=ready.serve_forever, daemon=True).start()
    try:
        yield StandIn(Endpoint("127.0.0.1", ready.server_address[1], grpc_port), triton)
    finally:
        ready.shutdown()
        ready.server_close()
        server.stop(None)


@contextmanager
def balancer(endpoints: list[Endpoint], workdir: Path) -> Iterator[Envoy]:
    envoy = find_envoy()
    if isinstance(envoy, str):
        pytest.skip(envoy)
    ports = BalancerPorts(*free_loopback_ports(4))
    config_path = workdir / "envoy.yaml"
    config_path.write_text(envoy_config(endpoints, ports, {"listenAddress": "127.0.0.1"}))
    log_path = workdir / "envoy.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(envoy), "--config-path", str(config_path), "--concurrency", "1"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    running = Envoy(process, ports, config_path)
    try:
        wait_until_ready(
            lambda: (
                answers_ok(running.admin_url("/ready"))
                and len(running.routable_ports()) == len(endpoints)
            ),
            process,
            log_path,
            what="envoy",
            timeout_s=30.0,
            interval_s=0.1,
        )
        yield running
    finally:
        stop(process, 10.0)


def test_a_request_a_stopping_server_cancelled_is_retried_on_another(tmp_path: Path) -> None:
    with ExitStack() as stack:
        stopping = stack.enter_context(stand_in(cancels=True))
        serving = stack.enter_context(stand_in(cancels=False))
        envoy = stack.enter_context(balancer([stopping.endpoint, serving.endpoint], tmp_path))
        channel = stack.enter_context(grpc.insecure_channel(envoy.grpc_url))
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for index in range(REQUESTS):
            answer = stub.ModelInfer(
                service_pb2.ModelInferRequest(model_name="embed", id=str(index)), timeout=10
            )
            assert answer.id == str(index)
    assert stopping.triton.calls > 0, "the balancer never tried the stopping server"
    assert serving.triton.calls == REQUESTS
