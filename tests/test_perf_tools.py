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


# perf.multivector: its arguments, its documents, its wire measures, its checks and its report,
# from rows and numbers made here (nothing served). Imported in the tests, as perf.rerank's.


def test_multivector_arguments_default_to_the_full_run_and_quick_to_a_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from perf.multivector import parse_args

    args = parse_args(["--output", "out.md"])
    assert (args.seconds, args.concurrency, args.requests) == (10.0, [1, 2, 4], 6)
    quick = parse_args(["--output", "out.md", "--quick"])
    assert (quick.seconds, quick.concurrency, quick.requests) == (3.0, [1], 2)
    # What is given wins over --quick's.
    assert parse_args(["--output=o", "--quick", "--seconds", "5"]).seconds == 5.0
    with pytest.raises(SystemExit):
        parse_args(["--output", "out.md", "--requests", "0"])
    assert "must be positive" in capsys.readouterr().err


def test_multivector_documents_are_fixed_distinct_and_about_290_tokens() -> None:
    from perf.multivector_load import long_document_requests, mean_pair_tokens, mean_tokens

    requests = long_document_requests(6)
    assert requests == long_document_requests(6)
    documents = [document for request in requests for document in request.documents]
    assert all(len(request.documents) == 32 for request in requests)
    assert len(set(documents)) == len(documents) == 6 * 32
    queries = [request.query for request in requests]
    assert len(set(queries)) == 6
    # The benchmark models' vocabulary is the packaged MiniLM's.
    tokens = mean_tokens(str(TOKENIZER_JSON), documents)
    assert 280 <= tokens <= 300
    # A pair is both texts with one [CLS] and [SEP] between and after them.
    pairs = [pair for request in requests for pair in request.pairs]
    assert mean_pair_tokens(str(TOKENIZER_JSON), pairs) == pytest.approx(
        tokens + mean_tokens(str(TOKENIZER_JSON), queries) - 1
    )
    with pytest.raises(ValueError, match="fewer than 8 requests"):
        long_document_requests(8)


def _multivector_rows(documents: list[np.ndarray]) -> np.ndarray:
    """Rows by the contract's layout (docs/contract.md, "Multi-vector rows"): a uint32 count,
    the vectors' bytes, zeros up to the widest row."""
    parts = [np.uint32(len(each)).tobytes() + each.tobytes() for each in documents]
    width = max(len(part) for part in parts)
    padded = b"".join(part.ljust(width, b"\0") for part in parts)
    return np.frombuffer(padded, np.uint8).reshape(len(parts), width).copy()


def test_multivector_wire_bytes_and_decode_times_of_rows_made_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import orjson

    from perf import multivector_wire
    from perf.multivector_wire import decode_times, json_body, wire_bytes

    rng = np.random.default_rng(0)
    counts = (2, 5, 4)
    vectors = [rng.standard_normal((count, 16)).astype(np.float32) for count in counts]
    codes = [rng.integers(-128, 128, (count, 16), dtype=np.int8) for count in counts]
    bits = [rng.integers(-128, 128, (count, 2), dtype=np.int8) for count in counts]
    responses = {
        "float32": _multivector_rows(vectors),
        "float16": _multivector_rows([each.astype(np.float16) for each in vectors]),
        "int8": _multivector_rows(codes),
        "binary": _multivector_rows(bits),
    }
    wire = wire_bytes({dtype: [rows] for dtype, rows in responses.items()})
    assert (wire.vectors, wire.dims) == (pytest.approx(11 / 3), 16)
    bytes_per_vector = {"float32": 64, "float16": 32, "int8": 16, "binary": 2}
    for dtype, size in bytes_per_vector.items():
        assert wire.own[dtype] == pytest.approx(4 + size * 11 / 3)
        assert wire.sent[dtype] == 4 + size * 5  # the widest row's
    body = json_body(vectors)
    assert wire.json_float32 == pytest.approx(len(body) / 3)
    # Shortest float32 digits read back exactly; a double's digits are longer.
    for parsed, each in zip(orjson.loads(body), vectors, strict=True):
        assert np.array_equal(np.asarray(parsed, np.float32), each)
    assert wire.json_widened > wire.json_float32
    monkeypatch.setattr(multivector_wire, "ROUND_S", 0.001)
    times = decode_times(responses)
    assert times.documents == 3 and list(times.rows) == list(responses)
    assert min(times.rows.values()) > 0 and times.json_loads > 0 and times.orjson_loads > 0


def test_multivector_checks_hold_counts_cosines_and_scores() -> None:
    from perf.multivector_checks import check_scores, check_vectors

    rng = np.random.default_rng(0)
    reference = [rng.standard_normal((count, 8)).astype(np.float32) for count in (3, 4)]
    halves = [each.astype(np.float16) for each in reference]
    assert check_vectors("float16", halves, reference).ok
    short = check_vectors("short", [reference[0][:2], reference[1]], reference)
    assert (short.count_mismatches, short.ok) == (1, False)
    noisy = [each + 0.1 * rng.standard_normal(each.shape).astype(np.float32) for each in reference]
    assert not check_vectors("noisy", noisy, reference).ok
    scores = np.array([1.0, 2.0], np.float32)
    assert check_scores("close", [1.0, 2.0005], scores).ok
    assert not check_scores("far", [1.0, 2.002], scores).ok
    assert not check_scores("one missing", [1.0], scores).ok


def test_multivector_report_states_rates_ratios_bytes_and_checks() -> None:
    import dataclasses

    from perf.multivector_checks import ScoreCheck, VectorCheck
    from perf.multivector_report import PyLateResult, Result, failed_checks, render
    from perf.multivector_wire import DecodeTimes, WireBytes
    from perf.rerank_load import Point
    from perf.rerank_report import Settings, Sweep

    def point(concurrency: int, texts: int) -> Point:
        """`texts` in 10 s, in requests of 32 taking 100, 101, ... ms."""
        requests = texts // 32
        return Point(concurrency, texts, requests, 10.0, tuple(range(100, 100 + requests)))

    result = Result(
        name="minilm-l6-colbert-random",
        shape="BERT, 384 wide",
        document_tokens=289.6,
        query_tokens=13.0,
        encode=(
            Sweep("ours, float16 rows: tritonserver, gRPC", (point(1, 320), point(2, 480))),
            Sweep("ours, float32 rows: tritonserver, gRPC", (point(1, 320), point(2, 416))),
        ),
        encode_document=point(1, 160),
        threads=2,
        pylate=PyLateResult("pylate 1.6.0", None, None, "the folder did not load: an error"),
        cross_encoder="minilm-l6-reranker-random (BERT, 384 wide)",
        pair_tokens=301.6,
        maxsim=Sweep("MaxSim: tritonserver, gRPC", (point(1, 320),)),
        cross_encoder_sweep=Sweep("cross-encoder: tritonserver, gRPC", (point(1, 256),)),
        vector_check=VectorCheck("served float32 vectors vs encode_document", 32, 0, 0.999999),
        score_check=ScoreCheck("served MaxSim scores vs similarity", 4e-6),
        wire=WireBytes(
            vectors=220.0,
            dims=128,
            own={"float32": 112644.0, "float16": 56324.0, "int8": 28164.0, "binary": 3524.0},
            sent={"float32": 130000.0, "float16": 65000.0, "int8": 32500.0, "binary": 4100.0},
            json_float32=338000.0,
            json_widened=585000.0,
        ),
        decode=DecodeTimes(
            documents=32,
            rows={"float32": 1.5, "float16": 1.5, "int8": 1.5, "binary": 1.5},
            json_loads=3000.0,
            orjson_loads=2250.0,
        ),
    )
    settings = Settings("python -m perf.multivector --quick", "a CPU, class avx2", 10.0, 6, 32)
    report = render(result, settings)
    assert "`python -m perf.multivector --quick`" in report
    assert "a CPU, class avx2" in report and "random weights" in report
    assert "in-process encode_document 16.0 (served float16 / it x3.00)" in report
    assert "| ours, float16 rows: tritonserver, gRPC | c=2 | 48.0 | 15 | 107 | 114 |" in report
    assert "| ours, float16 | 56324 | 65000 | x5.20 |" in report
    assert "| json.loads + numpy | 3000 | x2000 |" in report
    assert "against the cross-encoder's 25.6 on the same server and engine (x1.25)" in report
    assert "PyLate (pylate 1.6.0) not measured: the folder did not load: an error." in report
    assert not failed_checks(result) and "FAILED" not in report
    failing = dataclasses.replace(result, score_check=ScoreCheck("served MaxSim", 2e-3))
    assert len(failed_checks(failing)) == 1
    assert "**Checks FAILED:**" in render(failing, settings)
