"""The report's tables from given measurements: efficiency against the
in-process ceiling (with unswept and failed workloads), the ablation's
ratios, and the graphs' target verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf.ablation import STEPS, AblationRow, ablation_table
from perf.ceiling import Ceiling, Layout, Rate
from perf.graphs import Baseline, Cosines, Graph, GraphResult, ServedGraph, served_markdown
from perf.perf_analyzer import ClientMeasurement, Measurement, StageTimes
from perf.report import Served, efficiency_table
from perf.sweep import SweepResult
from perf.workloads import Workload, workload


def _measurement(texts_per_s: float, batch_size: int = 8, load: float = 1) -> Measurement:
    return Measurement(
        mode="concurrency",
        load=load,
        batch_size=batch_size,
        infer_per_sec=texts_per_s,
        p50_ms=10.0,
        p90_ms=20.0,
        p95_ms=25.0,
        p99_ms=30.0,
        avg_ms=12.0,
        client_send_us=0.0,
        client_recv_us=0.0,
        network_us=0.0,
        server=StageTimes(1.0, 2.0, 3.0, 4.0),
    )


def _ceiling(texts_per_s: float, texts_per_request: int = 8) -> Ceiling:
    rate = Rate(Layout(2, 1), texts_per_s, texts_per_s * 40, 10, 1.0, 2.0)
    return Ceiling(Path("model.onnx"), texts_per_request, rate, (rate,))


@pytest.fixture(scope="module")
def loads() -> list[Workload]:
    return [workload("short", 8, requests=2), workload("long", 8, requests=2)]


def test_efficiency_rows_for_swept_failed_and_unswept_workloads(loads: list[Workload]) -> None:
    short, long = loads
    sweep = SweepResult(
        "embed",
        short,
        "concurrency",
        (),
        [_measurement(60.0, load=1), _measurement(90.0, load=4)],
    )
    served = Served(
        closed={short.name: sweep},
        opened={},
        failures={},
        ceilings={short.name: _ceiling(100.0), long.name: _ceiling(20.0)},
    )
    table = efficiency_table(served, loads).splitlines()
    assert len(table) == 4
    assert "| short-8 |" in table[2] and "90.0 (c=4)" in table[2] and "| 90% |" in table[2]
    assert "not swept" in table[3] and "20.0" in table[3]

    failed = Served({}, {}, {long.name: "Request timeout expired"}, served.ceilings)
    assert "Request timeout expired" in efficiency_table(failed, loads).splitlines()[3]


def test_ablation_ratios_only_against_a_measured_first_step(loads: list[Workload]) -> None:
    short, long = loads
    step = {s.key: s for s in STEPS}
    rows = [
        AblationRow(step["a"], short, _measurement(20.0)),
        AblationRow(step["d"], short, _measurement(50.0)),
        AblationRow(step["a"], long, None, "perf_analyzer exited with 99\nmore"),
        AblationRow(step["d"], long, _measurement(8.0)),
    ]
    lines = ablation_table(rows).splitlines()
    assert lines[2].endswith("| 1.00x |") and lines[3].endswith("| 2.50x |")
    assert "failed: perf_analyzer exited with 99 |" in lines[4]
    assert lines[5].endswith("|  |")


def test_graph_target_is_against_infinity_and_needs_float32_accuracy(
    loads: list[Workload],
) -> None:
    short, _ = loads
    results = []
    served = []
    for kind, texts_per_s, minimum in (("plain", 95.0, 0.99999), ("int8", 130.0, 0.989)):
        graph = Graph(kind, Path("unused"))  # type: ignore[arg-type]
        results.append(
            GraphResult(graph, Cosines(minimum, minimum, 8), minimum, {short.name: _ceiling(100.0)})
        )
        served.append(ServedGraph(kind, short, _measurement(texts_per_s)))  # type: ignore[arg-type]
    levels = (ClientMeasurement(4, 8, 10.0, 50.0, 90.0), ClientMeasurement(8, 8, 9.0, 99.0, 150.0))
    baseline = Baseline(short, levels, Cosines(0.99999, 0.99999, 8))
    text = served_markdown(served, results, baseline)
    # Infinity's best level (80 texts/s at concurrency 4) sets the bar, not its last one.
    assert "1.2 x 80.0 (Infinity's best, concurrency 4, x0.80" in text
    assert "= 96.0 texts/s served" in text
    assert "| 80.0 | 50 / 90 | x0.84 | x0.80 |" in text
    assert "- plain: 95.0 texts/s (x1.19 Infinity), min cosine 1.0000" in text
    assert text.split("- plain:")[1].splitlines()[0].endswith("not met")
    # Fast enough, but below the float32 accuracy bar.
    int8 = text.split("- int8:")[1].splitlines()[0]
    assert "(x1.62 Infinity)" in int8
    assert int8.endswith("not met")
    # Met once fast enough at float32 accuracy.
    faster = [ServedGraph("plain", short, _measurement(97.0)), served[1]]  # type: ignore[arg-type]
    assert (
        served_markdown(faster, results, baseline)
        .split("- plain:")[1]
        .splitlines()[0]
        .endswith(": met")
    )


def test_graph_target_without_a_measured_baseline(loads: list[Workload]) -> None:
    short, _ = loads
    graph = Graph("plain", Path("unused"))
    results = [GraphResult(graph, Cosines(1.0, 1.0, 8), 1.0, {short.name: _ceiling(100.0)})]
    served = [ServedGraph("plain", short, _measurement(95.0))]
    baseline = Baseline(short, (), Cosines(1.0, 1.0, 8), "perf_analyzer exited with 99")
    text = served_markdown(served, results, baseline)
    assert (
        "Infinity was not measured (perf_analyzer exited with 99), so there is no target." in text
    )
    assert "met" not in text
