"""The fused and int8 graphs (export/optimize_graph.py through export_onnx.py --graph)
against the plain graph, what their export.json records, one served, and the
in-process ceiling (perf/ceiling.py) on a tiny run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from embedding_requests import SAMPLE_TEXTS, embed_raw
from tritonclient.grpc import InferenceServerClient

from export.engine_choice import MIN_COSINE as FLOAT32_MIN_COSINE
from harness.server import running_server
from perf.ceiling import available_cores, ceiling, layouts, serving_tokenizer, tokenize
from perf.graphs import (
    GRAPH_KINDS,
    Graph,
    GraphKind,
    build_graphs,
    graph_embeddings,
    serving_repository,
)
from perf.workloads import workload

FLOAT32_KINDS: tuple[GraphKind, ...] = ("plain", "fused")


@pytest.fixture(scope="session")
def graphs() -> dict[GraphKind, Graph]:
    """The float32 graphs, exported side by side into build/graphs (reused while current).
    The int8 graph has its own fixture: whether it keeps its bar is its own tests' business."""
    return build_graphs(FLOAT32_KINDS)


@pytest.fixture(scope="session")
def int8_graph() -> Graph:
    return build_graphs(("int8",))["int8"]


def row_cosines(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    return np.sum(left * right, axis=1) / (
        np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    )


def test_fused_graph_matches_the_plain_graph(graphs: dict[GraphKind, Graph]) -> None:
    plain = graph_embeddings(graphs["plain"], SAMPLE_TEXTS)
    fused = graph_embeddings(graphs["fused"], SAMPLE_TEXTS)
    cosines = row_cosines(fused, plain)
    assert cosines.min() >= FLOAT32_MIN_COSINE, dict(zip(SAMPLE_TEXTS, cosines, strict=True))


def test_int8_graph_stays_within_its_threshold(
    graphs: dict[GraphKind, Graph], int8_graph: Graph
) -> None:
    threshold = int8_graph.export_info["min_cosine_required"]
    plain = graph_embeddings(graphs["plain"], SAMPLE_TEXTS)
    int8 = graph_embeddings(int8_graph, SAMPLE_TEXTS)
    cosines = row_cosines(int8, plain)
    assert cosines.min() >= threshold, dict(zip(SAMPLE_TEXTS, cosines, strict=True))


@pytest.mark.parametrize("kind", GRAPH_KINDS)
def test_export_json_records_the_graph(request: pytest.FixtureRequest, kind: GraphKind) -> None:
    graph = (
        request.getfixturevalue("int8_graph")
        if kind == "int8"
        else request.getfixturevalue("graphs")[kind]
    )
    info = graph.export_info
    assert info["graph"] == kind
    assert info["min_cosine"] >= info["min_cosine_required"]
    assert min(info["check_cosines"].values()) == info["min_cosine"]
    if kind == "plain":
        assert info["fusions"] == {} and info["quantization"] is None
        assert info["min_cosine_required"] == FLOAT32_MIN_COSINE
    else:
        assert info["fusions"]["Attention"] > 0 and info["fusions"]["BiasGelu"] > 0
    if kind == "fused":
        assert info["quantization"] is None
        assert info["min_cosine_required"] == FLOAT32_MIN_COSINE
    if kind == "int8":
        assert info["quantization"] == {
            "method": "dynamic",
            "weight_type": "QInt8",
            "per_channel": True,
            "reduce_range": True,
        }
        assert info["min_cosine_required"] < FLOAT32_MIN_COSINE


def test_the_fused_graph_serves(graphs: dict[GraphKind, Graph], tmp_path: Path) -> None:
    repository = serving_repository(graphs["fused"], tmp_path / "repository")
    with running_server(tmp_path / "tritonserver.log", repositories=[repository]) as server:
        client = InferenceServerClient(server.grpc_url)
        rows = embed_raw(client, SAMPLE_TEXTS)
        client.close()
    served = np.frombuffer(rows.tobytes(), "<f4").reshape(len(SAMPLE_TEXTS), -1)
    cosines = row_cosines(served, graph_embeddings(graphs["plain"], SAMPLE_TEXTS))
    assert cosines.min() >= FLOAT32_MIN_COSINE, dict(zip(SAMPLE_TEXTS, cosines, strict=True))


def test_ceiling_on_a_tiny_run(graphs: dict[GraphKind, Graph]) -> None:
    tiny = workload("short", 4, requests=4)
    graph = graphs["plain"]
    result = ceiling(graph.model_path, tiny, seconds=1.0, tokenizer_path=graph.tokenizer_path)

    assert [rate.layout for rate in result.rates] == list(layouts(available_cores()))
    assert result.best.sentences_per_s == max(rate.sentences_per_s for rate in result.rates)
    assert result.configuration == str(result.best.layout)
    assert result.texts_per_request == 4
    batches = tokenize(serving_tokenizer(graph.tokenizer_path), tiny.requests)
    per_text = [int(count) for batch in batches for count in batch.attention_mask.sum(axis=1)]
    for rate in result.rates:
        assert rate.sentences_per_s > 0 and rate.requests >= 1 and rate.cpu_seconds > 0
        assert 0.4 < rate.seconds < 5.0
        # Whatever requests ran, real tokens per sentence lie within the texts' own range.
        tokens_per_sentence = rate.tokens_per_s / rate.sentences_per_s
        assert min(per_text) - 1e-6 <= tokens_per_sentence <= max(per_text) + 1e-6
