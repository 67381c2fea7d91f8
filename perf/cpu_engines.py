"""The CPU engines side by side, in one run on one machine: ONNX Runtime
float32 and int8, OpenVINO float32 and bfloat16 on the same exported graph,
in-process (all cores) with their cosine to sentence-transformers; then
served through the whole `embed` ensemble at 1 to 16 concurrent clients, the
shipped embedder against the ONNX Runtime one and against the instance and
stream layouts it replaced; Infinity (perf/infinity.py) on the same texts;
and single texts: where a request's milliseconds go, and the p99 at half of
the capacity.

    .venv/bin/python -m perf.cpu_engines [--results perf/results/debian12-2core]

Writes cpu_engines.md into the results folder and perf_analyzer's CSVs and
logs into its cpu_engines/ subfolder. It starts its own servers, one after the other, and takes about 25
minutes on 2 cores; nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from model_common.openvino_runtime import ov
from model_common.processor import this_processor
from tritonclient.grpc import model_config_pb2

from harness.priority import BULK
from harness.repository import ConfigEdit, repository_variant, set_parameter
from harness.server import running_server
from perf.ceiling import Batch, serving_tokenizer, tokenize
from perf.graphs import (
    EXPORT_PYTHON,
    Baseline,
    Cosines,
    FloatArray,
    build_graphs,
    cosines,
    measure_baseline,
    reference_embeddings,
)
from perf.perf_analyzer import Measurement, PerfAnalyzerError, run_perf_analyzer
from perf.sweep import Target, Windows, concurrency_sweep, input_data
from perf.workloads import Workload, texts, workload
from server.paths import (
    ONNX_CPU_REPOSITORY,
    ONNX_MODEL_DIR,
    OPENVINO_CPU_REPOSITORY,
    OPENVINO_MODEL_DIR,
    REPO_ROOT,
    SHARED_REPOSITORY,
    default_repositories,
)

OPENVINO_INT8_ROOT = REPO_ROOT / "build" / "graphs" / "openvino_int8"
WORKLOADS = (("query", 8), ("short", 8), ("long", 8), ("short", 1))
CONCURRENCY = (1, 2, 4, 8, 16)
# Within noise: a level may fall this far below the best level before it.
MONOTONIC_TOLERANCE = 0.9
WINDOWS = Windows(measurement_ms=4000, stability_percentage=50.0, max_trials=8)
# The embedder answers up to 8 long-8 requests at once, a few such bursts a
# second: a 4 s window gains or loses a whole burst at each edge. A window
# that ends once 32 requests are answered ends at an answer instead.
LONG_WINDOWS = Windows(measurement_requests=32, stability_percentage=50.0, max_trials=8)
COSINE_TEXTS = {"query": 64, "short": 64, "long": 16}
# Infinity's tokenizer truncates at 512 tokens where the model keeps 256: its
# cosine is taken on the texts both keep whole.
BASELINE_WORKLOADS = ("query-8", "short-8")
LAYOUT_WORKLOADS = ("short-8", "long-8")
IN_PROCESS_SECONDS = 3.0
TARGET_OVER_INFINITY = 2.0
TARGET_OVER_CEILING = 1.15
CEILING_ENGINE = "ONNX Runtime fp32"
SINGLE_TEXT_P99_MS = 50.0

Runner = Callable[[Batch], FloatArray]


@dataclass(frozen=True)
class Engine:
    """One engine on one graph: `runner()` makes an independent runner (a
    session, an infer request) for one worker thread."""

    name: str
    runner: Callable[[], Runner]


def onnxruntime_engine(name: str, model: Path) -> Engine:
    def runner() -> Runner:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])

        def run(batch: Batch) -> FloatArray:
            feeds = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
            return session.run(["embedding"], feeds)[0]

        return run

    return Engine(name, runner)


def openvino_engine(name: str, model_xml: Path, precision: str, workers: int) -> Engine:
    """One compiled model with a stream of one thread per worker, as the
    served embedder compiles it."""
    compiled = ov.Core().compile_model(
        str(model_xml),
        "CPU",
        {
            "INFERENCE_PRECISION_HINT": precision,
            "NUM_STREAMS": workers,
            "INFERENCE_NUM_THREADS": workers,
        },
    )
    output = compiled.output("embedding")

    def runner() -> Runner:
        request = compiled.create_infer_request()

        def run(batch: Batch) -> FloatArray:
            feeds = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
            return request.infer(feeds)[output].copy()

        return run

    return Engine(name, runner)


def quantize_openvino(workdir: Path) -> tuple[Path, str] | str:
    """OpenVINO's int8 IR (export/quantize_openvino.py), calibrated on workload texts that the
    cosine check does not use: its model.xml and the export's complaint ("" when it kept the
    bar), or why there is none."""
    calibration = workdir / "calibration.txt"
    calibration.write_text(
        "\n".join(
            text for kind, count in COSINE_TEXTS.items() for text in texts(kind, 2 * count)[count:]
        )
    )
    completed = subprocess.run(
        [
            str(EXPORT_PYTHON),
            str(REPO_ROOT / "export" / "quantize_openvino.py"),
            "--calibration-texts",
            str(calibration),
            "--target",
            str(OPENVINO_INT8_ROOT),
        ],
        capture_output=True,
        text=True,
    )
    model_xml = OPENVINO_INT8_ROOT / "openvino_cpu" / "embedder" / "1" / "model.xml"
    if completed.returncode != 0:
        error = (completed.stderr.strip().splitlines() or ["failed"])[-1]
        # Below the cosine bar it is measured all the same, and said so.
        return (model_xml, error) if model_xml.exists() else error
    return model_xml, ""


def in_process_rate(engine: Engine, batches: Sequence[Batch], workers: int) -> float:
    """texts/s with `workers` threads (one per core), each with its own
    runner, taking the requests in turn."""
    runners = [engine.runner() for _ in range(workers)]
    for run in runners:
        run(batches[0])
    counts = [0] * workers
    deadline = time.perf_counter() + IN_PROCESS_SECONDS

    def drive(index: int) -> None:
        position = index
        while time.perf_counter() < deadline:
            batch = batches[position % len(batches)]
            runners[index](batch)
            counts[index] += batch.sentences
            position += workers

    started = time.perf_counter()
    threads = [threading.Thread(target=drive, args=(index,)) for index in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


def engine_embeddings(engine: Engine, sentences: Sequence[str]) -> FloatArray:
    run = engine.runner()
    requests = [sentences[start : start + 8] for start in range(0, len(sentences), 8)]
    return np.concatenate([run(batch) for batch in tokenize(serving_tokenizer(), requests)])


@dataclass(frozen=True)
class EngineRow:
    engine: str
    cosines: Cosines
    texts_per_s: dict[str, float]  # by workload name


def compare_engines(
    engines: Sequence[Engine],
    loads: Sequence[Workload],
    model_dir: str,
    sentences: Sequence[str],
    workers: int,
) -> list[EngineRow]:
    """Workloads are the outer loop, so the engines of one workload run back
    to back under the same machine conditions."""
    reference = reference_embeddings(model_dir, sentences)
    rates: dict[str, dict[str, float]] = {engine.name: {} for engine in engines}
    tokenizer = serving_tokenizer()
    for load in loads:
        batches = tokenize(tokenizer, load.requests)
        for engine in engines:
            rates[engine.name][load.name] = in_process_rate(engine, batches, workers)
    return [
        EngineRow(
            engine.name,
            cosines(engine_embeddings(engine, sentences), reference),
            rates[engine.name],
        )
        for engine in engines
    ]


def instances(count: int) -> ConfigEdit:
    def edit(config: model_config_pb2.ModelConfig) -> None:
        config.instance_group[0].count = count

    edit.__name__ = f"instances({count})"
    return edit


@dataclass(frozen=True)
class Served:
    """One setup served on one workload, by concurrency level; None where
    perf_analyzer could not measure the level."""

    setup: str
    workload: Workload
    levels: dict[int, Measurement | None]

    def texts_per_s(self, level: int) -> float | None:
        measurement = self.levels.get(level)
        return measurement.infer_per_sec if measurement else None

    @property
    def best(self) -> Measurement | None:
        measured = [m for m in self.levels.values() if m is not None]
        return max(measured, key=lambda m: m.infer_per_sec, default=None)

    @property
    def monotonic(self) -> bool:
        best = 0.0
        for level in sorted(self.levels):
            rate = self.texts_per_s(level)
            if rate is None or rate < best * MONOTONIC_TOLERANCE:
                return False
            best = max(best, rate)
        return True


def sweep_levels(url: str, setup: str, label: str, load: Workload, results: Path) -> Served:
    target = Target(url, priority=BULK)
    levels: dict[int, Measurement | None] = {}
    for level in CONCURRENCY:
        try:
            result = concurrency_sweep(
                target,
                load,
                results,
                label=f"{label}_c{level}",
                concurrency=(level, level, 1),
                windows=LONG_WINDOWS if load.kind == "long" else WINDOWS,
            )
            levels[level] = result.best
        except PerfAnalyzerError:
            levels[level] = None
    return Served(setup, load, levels)


@dataclass(frozen=True)
class SingleText:
    """short-1 on the shipped setup: one client's stage times, and Poisson
    arrivals at half the best request rate of the sweep."""

    one_client: Measurement
    offered_per_s: float
    half_capacity: Measurement | None
    error: str = ""


def single_text(url: str, served: Served, results: Path) -> SingleText | None:
    one_client, best = served.levels.get(1), served.best
    if one_client is None or best is None:
        return None
    rate = round(best.requests_per_sec / 2, 1)
    load = served.workload
    try:
        (measurement,) = run_perf_analyzer(
            "embed",
            url,
            "grpc",
            input_data(Target(url), load),
            results / f"shipped_{load.name}_poisson{rate:g}.csv",
            batch_size=load.texts_per_request,
            request_rate=(rate, rate, rate),
            poisson=True,
            request_count=max(60, int(rate * 15)),
        )
    except PerfAnalyzerError as error:
        return SingleText(one_client, rate, None, str(error).splitlines()[-1])
    return SingleText(one_client, rate, measurement)


Setup = tuple[str, dict[str, ConfigEdit], Sequence[Path]]
# Each CPU embedder served alone, by its repository folder.
ENGINE_SETUPS: dict[Path, tuple[str, Setup]] = {
    OPENVINO_CPU_REPOSITORY: (
        "OpenVINO, 2 instances x 2 streams",
        ("openvino", {}, (SHARED_REPOSITORY, OPENVINO_CPU_REPOSITORY)),
    ),
    ONNX_CPU_REPOSITORY: (
        "ONNX Runtime fp32, 2 instances x 1 thread",
        ("onnxruntime", {}, (SHARED_REPOSITORY, ONNX_CPU_REPOSITORY)),
    ),
}
SHIPPED = "shipped: "


def served_setups() -> dict[str, Setup]:
    """The launcher's default first, named SHIPPED + its engine, then the
    engine it did not choose."""
    default = default_repositories()
    name, _ = ENGINE_SETUPS[default[-1]]
    return {
        f"{SHIPPED}{name}": ("shipped", {}, default),
        **{
            other: setup
            for folder, (other, setup) in ENGINE_SETUPS.items()
            if folder != default[-1]
        },
    }


def is_shipped(row: Served) -> bool:
    return row.setup.startswith(SHIPPED)


# The layouts the shipped one replaced, on the 8-text workloads.
LAYOUT_SETUPS: dict[str, Setup] = {
    "OpenVINO, 2 instances x 1 stream": (
        "ov_2x1",
        {"embedder": set_parameter("threads", "1")},
        (SHARED_REPOSITORY, OPENVINO_CPU_REPOSITORY),
    ),
    "OpenVINO, 1 instance x 2 streams": (
        "ov_1x2",
        {"embedder": instances(1)},
        (SHARED_REPOSITORY, OPENVINO_CPU_REPOSITORY),
    ),
}


def serve_setups(
    setups: dict[str, Setup],
    loads: Sequence[Workload],
    workdir: Path,
    results: Path,
) -> tuple[list[Served], SingleText | None]:
    served: list[Served] = []
    single: SingleText | None = None
    for setup, (label, edits, sources) in setups.items():
        repositories = (
            [repository_variant(workdir / label, edits, sources)] if edits else list(sources)
        )
        with running_server(workdir / f"{label}.log", repositories) as server:
            for load in loads:
                row = sweep_levels(server.grpc_url, setup, label, load, results)
                served.append(row)
                if label == "shipped" and load.texts_per_request == 1:
                    single = single_text(server.grpc_url, row, results)
    return served, single


def _rate(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "n/a"


def engines_markdown(rows: Sequence[EngineRow], loads: Sequence[Workload], workers: int) -> str:
    names = [load.name for load in loads]
    lines = [
        f"In-process, {workers} worker threads (one per core), each with its own session or "
        "infer request of one thread, each request of a workload run whole (padded to its "
        "longest text); texts/s. Cosine: each engine's embeddings of "
        f"{sum(COSINE_TEXTS.values())} held-out workload texts ("
        + ", ".join(f"{count} {kind}" for kind, count in COSINE_TEXTS.items())
        + ") against sentence-transformers on the original weights.",
        "",
        "| engine | " + " | ".join(names) + " | min cosine | mean cosine |",
        "|---|" + "---|" * (len(names) + 2),
    ]
    for row in rows:
        rates = " | ".join(_rate(row.texts_per_s.get(name)) for name in names)
        lines.append(
            f"| {row.engine} | {rates} | {row.cosines.minimum:.6f} | {row.cosines.mean:.6f} |"
        )
    return "\n".join(lines) + "\n"


def served_markdown(served: Sequence[Served]) -> str:
    lines = [
        "| setup | workload | "
        + " | ".join(f"c={level}" for level in CONCURRENCY)
        + " | best p99 ms | monotonic |",
        "|---|---|" + "---|" * (len(CONCURRENCY) + 2),
    ]
    for row in served:
        cells = " | ".join(_rate(row.texts_per_s(level)) for level in CONCURRENCY)
        best = row.best
        p99 = f"{best.p99_ms:.0f}" if best else "n/a"
        lines.append(
            f"| {row.setup} | {row.workload.name} | {cells} | {p99} | "
            f"{'yes' if row.monotonic else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def efficiency_markdown(
    served: Sequence[Served], engines: Sequence[EngineRow], pairs: dict[str, str]
) -> str:
    """Served best over the in-process rate of the same engine: `pairs` maps
    a served setup to its in-process engine row."""
    by_engine = {row.engine: row for row in engines}
    lines = [
        "| setup | workload | served best texts/s | in-process texts/s | served / in-process |",
        "|---|---|---|---|---|",
    ]
    for row in served:
        engine = by_engine.get(pairs.get(row.setup, ""))
        best = row.best
        if engine is None or best is None:
            continue
        ceiling = engine.texts_per_s.get(row.workload.name)
        if not ceiling:
            continue
        lines.append(
            f"| {row.setup} | {row.workload.name} | {best.infer_per_sec:.1f} | "
            f"{ceiling:.1f} | {best.infer_per_sec / ceiling:.2f} |"
        )
    return "\n".join(lines) + "\n"


def baseline_markdown(served: Sequence[Served], baselines: Sequence[Baseline]) -> str:
    lines = [
        "| workload | Infinity best texts/s (concurrency) | Infinity min cosine | "
        f"shipped best texts/s | shipped / Infinity | target x{TARGET_OVER_INFINITY:g} |",
        "|---|---|---|---|---|---|",
    ]
    shipped = {row.workload.name: row for row in served if is_shipped(row)}
    for baseline in baselines:
        best = baseline.best
        ours = shipped.get(baseline.workload.name)
        ours_best = ours.best if ours else None
        if best is None or ours_best is None:
            lines.append(
                f"| {baseline.workload.name} | not measured: {baseline.error or 'no result'} "
                "| | | | |"
            )
            continue
        ratio = ours_best.infer_per_sec / best.sentences_per_sec
        lines.append(
            f"| {baseline.workload.name} | {best.sentences_per_sec:.1f} (c={best.concurrency}) | "
            f"{baseline.cosines.minimum:.6f} | {ours_best.infer_per_sec:.1f} | x{ratio:.2f} | "
            f"{'met' if ratio >= TARGET_OVER_INFINITY else 'missed'} |"
        )
    return "\n".join(lines) + "\n"


def ceiling_markdown(served: Sequence[Served], engines: Sequence[EngineRow]) -> str:
    """The shipped setup's best served rate over ONNX Runtime's plain graph
    in-process, one single-thread session per core: what a server with no
    serving overhead of its own reaches on the plain graph."""
    (ceiling,) = [row for row in engines if row.engine == CEILING_ENGINE]
    lines = [
        f"{CEILING_ENGINE} in-process (one single-thread session per core) is the ceiling; "
        f"target: served >= {TARGET_OVER_CEILING:g}x of it.",
        "",
        "| workload | shipped best texts/s | ceiling texts/s | shipped / ceiling |",
        "|---|---|---|---|",
    ]
    for row in served:
        rate = ceiling.texts_per_s.get(row.workload.name)
        if not is_shipped(row) or row.best is None or not rate:
            continue
        lines.append(
            f"| {row.workload.name} | {row.best.infer_per_sec:.1f} | {rate:.1f} | "
            f"{row.best.infer_per_sec / rate:.2f} |"
        )
    return "\n".join(lines) + "\n"


def single_text_markdown(single: SingleText | None, ceiling: float | None) -> str:
    if single is None:
        return "Not measured: the shipped short-1 sweep has no one-client level.\n"
    m = single.one_client
    lines = [
        "One client, one short text per request (stage times per request, from "
        "Triton's statistics):",
        "",
        "| stage | queue ms | compute ms (input + infer + output) |",
        "|---|---|---|",
    ]
    for step in m.composing:
        stages = step.stages
        compute = (
            stages.compute_input_us + stages.compute_infer_us + stages.compute_output_us
        ) / 1000
        lines.append(f"| {step.model} | {stages.queue_us / 1000:.2f} | {compute:.2f} |")
    lines += [
        "",
        f"End to end at one client: p50 {m.p50_ms:.1f} ms, p99 {m.p99_ms:.1f} ms, "
        f"{m.infer_per_sec:.1f} texts/s"
        + (
            f"; in-process, one text per run on all cores: {ceiling:.1f} texts/s."
            if ceiling
            else "."
        ),
        "",
    ]
    if single.half_capacity is None:
        lines.append(f"At {single.offered_per_s:g} req/s (Poisson): not measured ({single.error}).")
    else:
        h = single.half_capacity
        held = "held" if h.p99_ms <= SINGLE_TEXT_P99_MS else "not held"
        lines.append(
            f"At half the best short-1 rate, {single.offered_per_s:g} req/s offered (Poisson): "
            f"p50 {h.p50_ms:.1f} ms, p99 {h.p99_ms:.1f} ms: p99 <= {SINGLE_TEXT_P99_MS:g} ms "
            f"{held}."
        )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Measured:
    """One run's figures, as the report shows them."""

    openvino_record: dict[str, Any]
    int8_ir: tuple[Path, str] | str
    loads: list[Workload]
    workers: int
    engine_rows: list[EngineRow]
    pairs: dict[str, str]  # served setup -> the in-process engine it runs
    shipped_setup: str
    served: list[Served]
    single: SingleText | None
    layouts: list[Served]
    baselines: list[Baseline]


def _engines(
    openvino_record: dict[str, Any], int8_ir: tuple[Path, str] | str, workers: int
) -> list[Engine]:
    """The in-process engines: ONNX Runtime on each graph, OpenVINO in each
    precision this processor runs, and NNCF's int8 IR where it was built."""
    model_xml = OPENVINO_MODEL_DIR / "model.xml"
    graphs = build_graphs(["fused", "int8"])
    engines = [
        onnxruntime_engine(CEILING_ENGINE, ONNX_MODEL_DIR / "model.onnx"),
        onnxruntime_engine("ONNX Runtime fp32, fused graph", graphs["fused"].model_path),
        onnxruntime_engine("ONNX Runtime int8 (dynamic)", graphs["int8"].model_path),
        openvino_engine("OpenVINO fp32", model_xml, "f32", workers),
    ]
    if this_processor().has_bf16:
        engines.append(openvino_engine("OpenVINO bf16", model_xml, "bf16", workers))
    if not isinstance(int8_ir, str):
        engines.append(
            openvino_engine(
                f"OpenVINO int8 (NNCF), {openvino_record['precision']} elsewhere",
                int8_ir[0],
                openvino_record["precision"],
                workers,
            )
        )
    return engines


def _measure(raw: Path) -> Measured:
    workers = len(os.sched_getaffinity(0))
    loads = [workload(kind, per) for kind, per in WORKLOADS]
    sentences = [text for kind, count in COSINE_TEXTS.items() for text in texts(kind, count)]
    openvino_record = json.loads((OPENVINO_MODEL_DIR / "export.json").read_text())["openvino"]
    model_dir = json.loads((ONNX_MODEL_DIR / "export.json").read_text())["model_dir"]
    with tempfile.TemporaryDirectory(prefix="quantize_") as work:
        int8_ir = quantize_openvino(Path(work))
    engines = _engines(openvino_record, int8_ir, workers)
    engine_rows = compare_engines(engines, loads, model_dir, sentences, workers)
    in_process = {
        OPENVINO_CPU_REPOSITORY: f"OpenVINO {openvino_record['precision']}",
        ONNX_CPU_REPOSITORY: CEILING_ENGINE,
    }
    pairs = {name: in_process[folder] for folder, (name, _) in ENGINE_SETUPS.items()}
    setups = served_setups()
    shipped_setup = next(iter(setups))
    pairs[shipped_setup] = in_process[default_repositories()[-1]]
    with tempfile.TemporaryDirectory(prefix="cpu_engines_") as work:
        workdir = Path(work)
        served, single = serve_setups(setups, loads, workdir, raw)
        layouts, _ = serve_setups(
            LAYOUT_SETUPS,
            [load for load in loads if load.name in LAYOUT_WORKLOADS],
            workdir,
            raw,
        )
        whole = [text for kind in ("query", "short") for text in texts(kind, COSINE_TEXTS[kind])]
        reference = reference_embeddings(model_dir, whole)
        baselines = [
            measure_baseline(load, whole, reference, workdir, raw)
            for load in loads
            if load.name in BASELINE_WORKLOADS
        ]
    return Measured(
        openvino_record,
        int8_ir,
        loads,
        workers,
        engine_rows,
        pairs,
        shipped_setup,
        served,
        single,
        layouts,
        baselines,
    )


def _int8_line(int8_ir: tuple[Path, str] | str) -> str:
    return "OpenVINO int8: " + (
        f"not built ({int8_ir})."
        if isinstance(int8_ir, str)
        else "export/quantize_openvino.py, NNCF post-training quantization calibrated on "
        f"{sum(COSINE_TEXTS.values())} other workload texts"
        + (f"; the export refused it: {int8_ir[1]}" if int8_ir[1] else ".")
    )


def _report(m: Measured) -> str:
    record = m.openvino_record
    openvino_engine_name = f"OpenVINO {record['precision']}"
    single_ceiling = next(
        (
            row.texts_per_s.get("short-1")
            for row in m.engine_rows
            if row.engine == m.pairs[m.shipped_setup]
        ),
        None,
    )
    layouts = [
        row
        for row in m.served
        if m.pairs.get(row.setup) == openvino_engine_name and row.workload.name in LAYOUT_WORKLOADS
    ] + m.layouts
    return "\n".join(
        [
            "# CPU engines (2-core machine)",
            "",
            f"Processor: {this_processor().describe()}.",
            "",
            "Generated by `.venv/bin/python -m perf.cpu_engines` in one run; the setups were "
            "measured one after the other on the same texts (perf/workloads.py: queries of "
            "8-14 tokens, short texts of about 50, long ones truncated at 256).",
            f"The export recorded: precision {record['precision']}, check-text cosines "
            f"{record['min_cosine']}, one-thread timing "
            f"{record['texts_per_s_one_thread']}, faster engine "
            f"{record['faster_engine']}.",
            "",
            "## Engines in-process",
            "",
            engines_markdown(m.engine_rows, m.loads, m.workers),
            ""
            if this_processor().has_bf16
            else "OpenVINO bf16: not measured, this processor has no bfloat16 instructions "
            "(avx512_bf16, amx_bf16).",
            "",
            _int8_line(m.int8_ir),
            "",
            "## Served: texts/s by concurrent clients",
            "",
            "Each level one perf_analyzer run over gRPC against `embed` at the bulk priority "
            f"level, windows of {WINDOWS.measurement_ms / 1000:g} s (long-8: of "
            f"{LONG_WINDOWS.measurement_requests} answered requests). Monotonic: no level below "
            f"{MONOTONIC_TOLERANCE:g}x the best level before it.",
            "",
            served_markdown(m.served),
            "## Served / in-process",
            "",
            efficiency_markdown(m.served, m.engine_rows, m.pairs),
            "## Against the ONNX Runtime ceiling",
            "",
            ceiling_markdown(m.served, m.engine_rows),
            "## Against Infinity",
            "",
            baseline_markdown(m.served, m.baselines),
            "## Instances and streams",
            "",
            served_markdown(layouts),
            "## Single texts",
            "",
            single_text_markdown(m.single, single_ceiling),
        ]
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--results", type=Path, default=REPO_ROOT / "perf" / "results" / "debian12-2core"
    )
    args = parser.parse_args(argv)
    results: Path = args.results
    raw = results / "cpu_engines"
    raw.mkdir(parents=True, exist_ok=True)
    # Only this run's CSVs and logs: file names carry rates that differ run to run.
    for stale in (*raw.glob("*.csv"), *raw.glob("*.log")):
        stale.unlink()
    report = _report(_measure(raw))
    (results / "cpu_engines.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
