"""perf_analyzer against the test server: short sweeps through perf.sweep,
the CSVs it really writes (the ensemble's and its composing models'), their
parsing, its errors, and the plots drawn from them."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from harness.gateway import running_gateway
from harness.priority import BULK
from harness.server import RunningServer
from perf.grouping import groups_by_rows
from perf.infinity import write_openai_input_data
from perf.perf_analyzer import (
    Measurement,
    PerfAnalyzerError,
    parse_csv,
    perf_analyzer_command,
    run_openai_perf_analyzer,
    run_perf_analyzer,
)
from perf.plots import plot_stage_breakdown, plot_throughput_vs_p99
from perf.sweep import (
    SweepResult,
    Target,
    Windows,
    concurrency_sweep,
    input_data,
    request_rate_sweep,
)
from perf.workloads import workload
from server.paths import TOKENIZER_JSON

STEPS = ["embedder", "serializer", "tokenizer"]
# Short windows and a loose stability bound: this checks the tooling, not
# the numbers, on a shared 2-core machine.
QUICK = Windows(measurement_ms=1000, stability_percentage=1000, max_trials=5)
REQUIRED_COLUMNS = {
    "Concurrency",
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
    "Avg latency",
}


def _header(path: Path) -> list[str]:
    with path.open(newline="") as file:
        return next(csv.reader(file))


def _embed_counts(server: RunningServer) -> tuple[int, int]:
    """(rows, requests) the `embed` ensemble has answered so far."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    (stats,) = client.get_inference_statistics("embed", as_json=True)["model_stats"]
    return int(stats.get("inference_count", 0)), int(
        stats["inference_stats"]["success"].get("count", 0)
    )


@pytest.fixture(scope="module")
def text_sweep(
    triton_server: RunningServer, tmp_path_factory: pytest.TempPathFactory
) -> SweepResult:
    results = tmp_path_factory.mktemp("sweep")
    metrics_url = f"{triton_server.endpoints.metrics_address}/metrics"
    # At the bulk level, as the report sends its sweeps.
    target = Target(url=triton_server.grpc_url, metrics_url=metrics_url, priority=BULK)
    before = _embed_counts(triton_server)
    sweep = concurrency_sweep(
        target,
        workload("short", 8, requests=4),
        results,
        label="smoke",
        concurrency=(1, 2, 1),
        windows=QUICK,
    )
    after = _embed_counts(triton_server)
    rows, requests = after[0] - before[0], after[1] - before[1]
    # perf_analyzer's -b 8 sent every request as 8 rows of the input data.
    assert requests > 0
    assert rows == 8 * requests
    return sweep


def test_perf_analyzer_is_installed() -> None:
    (command,) = perf_analyzer_command()
    assert Path(command).is_file()


def test_concurrency_sweep_writes_verbose_csvs(text_sweep: SweepResult) -> None:
    folder = text_sweep.csv_paths[0].parent
    assert REQUIRED_COLUMNS <= set(_header(text_sweep.csv_paths[0]))
    log = text_sweep.csv_paths[0].with_suffix(".log").read_text()
    assert log.count("Request concurrency:") == 2
    assert "--request-parameter priority:2:int" in log.splitlines()[0]
    for step in STEPS:
        composing = folder / f"{step}_v1.{text_sweep.csv_paths[0].name}"
        assert {"Concurrency", "Server Queue", "Server Compute Infer"} <= set(_header(composing))


def test_measurements_parse_with_composing_models(text_sweep: SweepResult) -> None:
    assert [measurement.load for measurement in text_sweep.measurements] == [1, 2]
    for measurement in text_sweep.measurements:
        assert measurement.batch_size == 8
        assert measurement.infer_per_sec > 0
        assert 0 < measurement.p50_ms <= measurement.p90_ms <= measurement.p99_ms
        assert measurement.avg_ms is not None and measurement.avg_ms > 0
        assert measurement.server.compute_infer_us > 0
        assert [step.model for step in measurement.composing] == STEPS
        embedder = measurement.composing[0]
        assert embedder.stages.compute_infer_us > 0
        # The model's own compute is within the client's latency.
        assert embedder.stages.compute_infer_us / 1000 < measurement.p99_ms
    assert parse_csv(text_sweep.csv_paths[0], "concurrency", 8) == text_sweep.measurements


def test_poisson_sweep_of_client_tokenized_requests(
    triton_server: RunningServer, tmp_path: Path
) -> None:
    target = Target(url=triton_server.grpc_url, model="embed_tokens", tokenized=True)
    # At most 20 texts/s: well below what the machine serves even when busy.
    sweep = request_rate_sweep(
        target,
        workload("short", 2, requests=4),
        tmp_path,
        label="smoke",
        rates=[5, 10],
        seconds_per_rate=1,
    )
    assert [path.name for path in sweep.csv_paths] == [
        "smoke_short-2_poisson_5.csv",
        "smoke_short-2_poisson_10.csv",
    ]
    assert [measurement.load for measurement in sweep.measurements] == [5, 10]
    for path in sweep.csv_paths:
        assert "Request Rate" in _header(path)
        log = path.with_suffix(".log").read_text()
        assert "Sending 30 benchmark requests" in log
        assert "Using poisson distribution" in log
    for measurement in sweep.measurements:
        assert measurement.infer_per_sec > 0
        assert [step.model for step in measurement.composing] == ["embedder", "serializer"]


def test_request_errors_raise_with_the_server_message(
    triton_server: RunningServer, tmp_path: Path
) -> None:
    target = Target(url=triton_server.grpc_url)
    load = workload("short", 1, requests=2)
    with pytest.raises(PerfAnalyzerError, match="dimensions"):
        run_perf_analyzer(
            "embed",
            target.url,
            "grpc",
            input_data(target, load),
            tmp_path / "bad.csv",
            concurrency=(1, 1, 1),
            extra=["--request-parameter", "dimensions:999:int"],
            measurement_ms=QUICK.measurement_ms,
        )


def test_range_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        run_perf_analyzer("embed", "x", "grpc", tmp_path, tmp_path / "a.csv")
    with pytest.raises(ValueError, match="poisson"):
        run_perf_analyzer(
            "embed", "x", "grpc", tmp_path, tmp_path / "a.csv", concurrency=(1, 2, 1), poisson=True
        )
    with pytest.raises(ValueError, match="gRPC only"):
        run_perf_analyzer(
            "embed", "x", "http", tmp_path, tmp_path / "a.csv", concurrency=(1, 1, 1), priority=2
        )


def _png(path: Path) -> bytes:
    content = path.read_bytes()
    assert content.startswith(b"\x89PNG\r\n\x1a\n")
    return content


def test_plots_of_real_measurements(text_sweep: SweepResult, tmp_path: Path) -> None:
    measurements: list[Measurement] = text_sweep.measurements
    curve = plot_throughput_vs_p99(
        {"embed short-8": measurements, "first level only": measurements[:1]},
        "smoke",
        tmp_path / "curve.png",
    )
    stages = plot_stage_breakdown(
        {"c=1": measurements[0], "c=2": measurements[1]}, "smoke", tmp_path / "stages.png"
    )
    assert len(_png(curve)) > 10_000
    assert len(_png(stages)) > 10_000
    with pytest.raises(ValueError):
        plot_throughput_vs_p99({"empty": []}, "smoke", tmp_path / "empty.png")


def _embedder_successes(server: RunningServer) -> int:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    (stats,) = client.get_inference_statistics("embedder", as_json=True)["model_stats"]
    return int(stats["inference_stats"]["success"].get("count", 0))


def test_openai_service_kind_measures_the_gateway(
    triton_server: RunningServer, tmp_path: Path
) -> None:
    """The path perf.graphs measures Infinity by, run against this project's own
    OpenAI-compatible gateway: perf_analyzer's OpenAI service kind with whole bodies."""
    load = workload("short", 8, requests=4)
    # `embed`: the Triton name every server has (the catalog MiniLM's alias).
    bodies = write_openai_input_data(load, tmp_path / "openai.json", model="embed")
    before = _embedder_successes(triton_server)
    with running_gateway(
        triton_server.grpc_url,
        [("embed", TOKENIZER_JSON)],
        tmp_path / "gateway.log",
        extra_args=(f"--priority={BULK}",),
    ) as gateway:
        measurements = run_openai_perf_analyzer(
            gateway.url.removeprefix("http://"),
            "v1/embeddings",
            bodies,
            tmp_path / "openai.csv",
            texts_per_request=8,
            concurrency=(1, 2, 1),
            measurement_ms=QUICK.measurement_ms,
            stability_percentage=QUICK.stability_percentage,
            max_trials=QUICK.max_trials,
        )
    assert [m.concurrency for m in measurements] == [1, 2]
    for measurement in measurements:
        assert measurement.sentences_per_sec > 0
        assert 0 < measurement.p50_ms <= measurement.p99_ms
    assert _embedder_successes(triton_server) > before


@pytest.mark.parametrize(
    ("rows", "rows_per_run", "sizes"),
    [
        (8, 16, [8]),
        (1, 16, [1]),
        (40, 16, [14, 13, 13]),
        (3, 2, [2, 1]),
    ],
)
def test_groups_by_rows_cut_equal_groups_within_bounds(
    rows: int, rows_per_run: int, sizes: list[int]
) -> None:
    lengths = np.arange(rows)[::-1] % 7 + 1
    groups = groups_by_rows(lengths, rows_per_run)
    assert [len(group) for group in groups] == sizes
    order = np.concatenate(groups)
    assert sorted(order.tolist()) == list(range(rows))
    # Each group holds rows no longer than the next group's.
    assert list(lengths[order]) == sorted(lengths)


# perf.rerank: its arguments, its requests and its report, from given numbers (nothing timed).
# Imported in the tests, so that this section stays an addition of its own.


def test_rerank_arguments_default_to_the_full_run_and_refuse_nonsense(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from perf.rerank import parse_args

    args = parse_args(["--output", "out.md"])
    assert (args.seconds, args.concurrency, args.requests) == (10.0, [1, 2, 4], 8)
    assert args.model == ["bert-base-reranker-random", "minilm-l6-reranker-random"]
    assert args.infinity_engine == ["torch", "optimum"]
    assert parse_args(["--output=o", "--infinity-engine=torch"]).infinity_engine == ["torch"]
    with pytest.raises(SystemExit):
        parse_args(["--output", "out.md", "--seconds", "0"])
    assert "must be positive" in capsys.readouterr().err


def test_rerank_requests_are_fixed_and_distinct() -> None:
    from perf.rerank_load import rerank_requests

    requests = rerank_requests(8)
    assert requests == rerank_requests(8)
    documents = [document for request in requests for document in request.documents]
    assert all(len(request.documents) == 32 for request in requests)
    assert len(set(documents)) == len(documents) == 8 * 32
    assert len({request.query for request in requests}) == 8


def test_rerank_report_states_rates_ratios_and_checks() -> None:
    import dataclasses

    from perf.ceiling import Layout
    from perf.rerank_ceiling import CeilingPoint
    from perf.rerank_load import Point
    from perf.rerank_report import Check, ModelResult, Settings, Sweep, failed_checks, render

    def point(concurrency: int, pairs: int) -> Point:
        """`pairs` in 10 s, in requests of 32 taking 100, 101, ... ms."""
        requests = pairs // 32
        return Point(concurrency, pairs, requests, 10.0, tuple(range(100, 100 + requests)))

    result = ModelResult(
        name="minilm-l6-reranker-random",
        shape="BERT, 384 wide",
        served_by="minilm-l6-reranker-random: reranker, engine openvino, precision f32 (auto)",
        query_tokens=13.0,
        pair_tokens=110.0,
        served=(
            Sweep("ours: OpenVINO f32", (point(1, 320), point(2, 640))),
            Sweep("ours: OpenVINO bf16", (point(1, 480), point(2, 960))),
        ),
        choice="ours: OpenVINO f32",
        infinity=(Sweep("Infinity torch", (point(1, 160),)),),
        predict=point(1, 128),
        predict_threads=2,
        ceiling=(CeilingPoint(Layout(2, 1), point(2, 800)),),
        checks=(
            Check("ours vs CrossEncoder.predict", 2e-7, 1e-4),
            Check("Infinity optimum vs CrossEncoder.predict", 2e-3, 1e-3, "no token type ids"),
        ),
    )
    settings = Settings("python -m perf.rerank --seconds 10", "a CPU, class avx2", 10.0, 8, 32)
    report = render([result], settings)
    assert "`python -m perf.rerank --seconds 10`" in report
    assert "a CPU, class avx2" in report and "random weights" in report
    # Both precisions side by side; the ratios are the choice's (f32, best 64 pairs/s): 4 x
    # Infinity's 16, 5 x predict's 12.8, 0.8 x the ceiling.
    summary = (
        "| minilm-l6-reranker-random | 64.0 | 96.0 | ours: OpenVINO f32 | 64.0 | 16.0 | x4.00 | "
        "12.8 | x5.00 | 80.0 | x0.80 |"
    )
    assert summary in report
    assert "| ours: OpenVINO f32 | c=2 | 64.0 | 20 | 110 | 119 | x1.00 |" in report
    assert "| ours: OpenVINO bf16 | c=2 | 96.0 | 30 | 114 | 129 | x0.67 |" in report
    assert "over, reported only: no token type ids" in report
    assert "engine openvino, precision f32 (auto)`" in report  # what served ours
    assert not failed_checks([result]) and "FAILED" not in report
    over = Check("ours vs CrossEncoder.predict", 2e-4, 1e-4)
    failing = dataclasses.replace(result, checks=(over,))
    assert len(failed_checks([failing])) == 1
    assert "**Score checks FAILED:**" in render([failing], settings)


# The benchmark rerankers' heads (harness/rerank_bench_models.py), on a small model of their kind.
SPREAD_HEAD_SCRIPT = """
import json
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification
from harness.rerank_bench_models import check_pairs, spread_head, vocabulary_folder
tokenizer = AutoTokenizer.from_pretrained(str(vocabulary_folder()))
config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=128, num_labels=1)
torch.manual_seed(0)
classifier = BertForSequenceClassification(config).eval()
scores = {}
for head in ("random", "spread"):
    if head == "spread":
        spread_head(classifier, tokenizer)
    features = tokenizer(*map(list, zip(*check_pairs())), padding=True, truncation=True,
                         max_length=512, return_tensors="pt")
    with torch.no_grad():
        scores[head] = torch.sigmoid(classifier(**features).logits[:, 0]).tolist()
print(json.dumps(scores))
"""


def test_the_benchmark_rerankers_scores_spread_over_the_check_pairs() -> None:
    """A random head scores every check pair about alike, so bf16's bound (a share of their
    spread) would refuse it on every machine; the spread head spans 0.02..0.98 of the sigmoid."""
    import json

    from harness.export_environment import run_in_export_environment

    done = run_in_export_environment(["-c", SPREAD_HEAD_SCRIPT])
    scores = json.loads(done.stdout.splitlines()[-1])
    assert np.ptp(scores["random"]) < 0.5
    assert min(scores["spread"]) == pytest.approx(0.018, abs=1e-3)
    assert max(scores["spread"]) == pytest.approx(0.982, abs=1e-3)
