"""The ablation's configurations serve the same embeddings as the shipped
ensemble (so the steps differ in speed only), and the capacity rule counts
only rates held below the first miss."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from embedding_requests import SAMPLE_TEXTS, embed_float32
from tritonclient.grpc import model_config_pb2

from export.engine_choice import MIN_COSINE
from harness.repository import edited, read_config
from harness.requests import text_inputs
from harness.server import RunningServer, running_server
from perf.ablation import naive_repository, one_instance_all_cores
from perf.capacity import RatePoint, capacity_at
from perf.perf_analyzer import Measurement, StageTimes
from server.paths import ONNX_CPU_REPOSITORY


@pytest.fixture(scope="module")
def naive_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("ablation")
    with running_server(workdir / "tritonserver.log", [naive_repository(workdir / "naive")]) as s:
        yield s


def test_naive_json_and_bytes_match_the_shipped_ensemble(
    naive_server: RunningServer, triton_server: RunningServer
) -> None:
    texts = list(SAMPLE_TEXTS)
    shipped = embed_float32(grpcclient.InferenceServerClient(triton_server.grpc_url), texts)

    http = httpclient.InferenceServerClient(naive_server.http_url)
    result = http.infer("naive_json", text_inputs(httpclient, texts))
    rows = result.as_numpy("EMBEDDING_JSON").reshape(-1)
    from_json = np.array([json.loads(row) for row in rows], dtype=np.float32)

    grpc = grpcclient.InferenceServerClient(naive_server.grpc_url)
    rows = grpc.infer("naive_bytes", text_inputs(grpcclient, texts)).as_numpy("EMBEDDING")
    from_bytes = np.frombuffer(rows.tobytes(), dtype="<f4").reshape(len(texts), -1)

    for served in (from_json, from_bytes):
        assert served.shape == shipped.shape
        assert np.min(np.sum(served * shipped, axis=1)) >= MIN_COSINE


def test_one_instance_variant_keeps_the_contract_but_not_the_instances() -> None:
    path = ONNX_CPU_REPOSITORY / "embedder" / "config.pbtxt"
    shipped, variant = read_config(path), edited(path, one_instance_all_cores(2))
    cpu = model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert [(group.kind, group.count) for group in variant.instance_group] == [(cpu, 1)]
    assert variant.parameters["intra_op_num_threads"].string_value == "2"
    assert variant.input == shipped.input and variant.output == shipped.output


def _point(rate: float, served: float, p99: float | None) -> RatePoint:
    if p99 is None:
        return RatePoint(rate, None, "failed requests")
    no_time = StageTimes(0.0, 0.0, 0.0, 0.0)
    measurement = Measurement(
        mode="request_rate",
        load=rate,
        batch_size=1,
        infer_per_sec=served,
        p50_ms=p99 / 2,
        p90_ms=p99,
        p95_ms=p99,
        p99_ms=p99,
        avg_ms=p99 / 2,
        client_send_us=0.0,
        client_recv_us=0.0,
        network_us=0.0,
        server=no_time,
    )
    return RatePoint(rate, measurement)


def test_capacity_is_the_last_rate_held_before_the_first_miss() -> None:
    points = [
        _point(10, 10, 40),
        _point(20, 19.8, 60),
        _point(30, 29, 120),
        _point(40, 40, 90),  # held again by luck: does not count
    ]
    assert capacity_at(points, 100) == 20
    assert capacity_at(points, 150) == 40
    assert capacity_at(points, 30) == 0


def test_capacity_needs_no_errors_and_ignores_the_reported_throughput() -> None:
    assert capacity_at([_point(10, 10, 20), _point(20, 20, None)], 100) == 10
    # perf_analyzer's fixed-count runs report less than the offered rate; p99 decides.
    assert capacity_at([_point(10, 8.5, 20), _point(20, 17, 30)], 100) == 20
