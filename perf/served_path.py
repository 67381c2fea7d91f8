"""Where a short request's time and CPU go on the served path, on this
machine, against the engine alone in-process; before and after a change to
the path, in one run.

For query-8 and short-1, each setup is served by a real tritonserver, one
after the other, and measured by perf_analyzer over gRPC at the bulk
priority level:
- texts/s at 1, 16 and 64 concurrent clients, and the best of them against
  the in-process rate of the engine it serves (perf.cpu_engines: one worker
  per core) and against the ONNX Runtime f32 ceiling (perf.ceiling: one
  single-thread session per core) on query-8;
- at one client, each stage's queue and compute time per request (Triton's
  statistics), and the client's own send, receive and network wait;
- at the best level, the CPU each process spends per request (tritonserver,
  with the gRPC frontend, the ensemble and the C++ serializer; the Python
  stubs of the tokenizer and the embedders; perf_analyzer), against the
  engine's CPU per request in-process;
- for the shipped setup, the same level over HTTP/JSON.
The setups are the shipped repository and, for each change to the path, the
shipped one without it, all served at once and measured in turns; the
engine's in-process rate is taken before and after them, the higher kept.
One reading of the embedder's backlog from Triton's metrics, the tokenizer's
door before its shared counts, is also timed on its own.

    .venv/bin/python -m perf.served_path [--results perf/results/debian12-2core]

Writes served_path.md into the results folder and perf_analyzer's CSVs into
its served_path/ subfolder. Takes about 14 minutes on 2 cores; nothing else
should run meanwhile.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from model_common.admission import WINDOW_CPU_S, BacklogLimit, read_pending
from model_common.processor import this_processor
from tritonclient.grpc import model_config_pb2

from harness.priority import BULK
from harness.repository import read_config, repository_variant
from harness.server import RunningServer, running_server
from perf.ceiling import available_cores, serving_tokenizer, tokenize
from perf.cpu_engines import Engine, in_process_rate, onnxruntime_engine, openvino_engine
from perf.perf_analyzer import Measurement, StageTimes
from perf.process_cpu import ROLES, ProcessCpu, cpu_per_request
from perf.report_command import write_report
from perf.sweep import Target, Windows, concurrency_sweep
from perf.workloads import Workload, workload
from server.paths import (
    ONNX_MODEL_DIR,
    OPENVINO_CPU_REPOSITORY,
    OPENVINO_MODEL_DIR,
    REPO_ROOT,
    SHARED_REPOSITORY,
    default_repositories,
)

WORKLOADS = (("query", 8), ("short", 1))
# The workload measured against the ceiling, of WORKLOADS.
CEILING_LOAD = "query-8"
LEVELS = (1, 16, 64)
WINDOWS = Windows(measurement_ms=3000, stability_percentage=50.0, max_trials=6)
TARGET_RATIO = 0.9
# On a processor with bfloat16, served query-8 against the ONNX Runtime f32
# ceiling: the lead over TEI, which serves at about that ceiling.
CEILING_TARGET = 1.6
VARIANTS = REPO_ROOT / "perf" / "served_path_variants"
STAGES = ("tokenizer", "embedder", "serializer")
GAUGE_READINGS = 300
TOKENIZING_REPEATS = 50
# The door's bound in requests before tokens set it.
REQUESTS_BEFORE = 8


@dataclass(frozen=True)
class Setup:
    name: str
    # Builds the repository folder to serve into the given folder; None: the shipped one.
    repository: Callable[[Path], Path] | None


def _door_by_requests(config: model_config_pb2.ModelConfig) -> None:
    """The tokenizer's door as it was bounded before its work set it: a count
    of requests waiting in the embedder, whatever their length."""
    config.parameters["max_embedder_backlog"].string_value = str(REQUESTS_BEFORE)
    config.parameters["max_embedder_backlog_seconds"].string_value = str(10**9)


def _variant(tokenizer_code: str | None) -> Callable[[Path], Path]:
    """The shipped repository with the door bounded by requests, and the
    tokenizer's code replaced by `tokenizer_code` if given."""

    def build(workdir: Path) -> Path:
        target = repository_variant(workdir / "repository", {"tokenizer": _door_by_requests})
        if tokenizer_code:
            code = target / "tokenizer" / "1" / "model.py"
            code.unlink()
            code.symlink_to(VARIANTS / tokenizer_code)
        return target

    return build


SETUPS = (
    Setup(
        "reads: the door reads Triton's metrics at every execute, 8 requests",
        _variant("tokenizer_reads_every_execute.py"),
    ),
    Setup("counts: the door reads shared counts, 8 requests", _variant(None)),
    Setup(
        "shipped: the door reads shared counts, a bound in seconds of work "
        "(max_embedder_backlog_seconds)",
        None,
    ),
)


@dataclass(frozen=True)
class Served:
    setup: str
    load: Workload
    levels: dict[int, Measurement]
    cpu: ProcessCpu
    http_texts_per_s: float | None

    @property
    def best(self) -> Measurement:
        return max(self.levels.values(), key=lambda m: m.infer_per_sec)


def serves_openvino() -> bool:
    return default_repositories()[1] == OPENVINO_CPU_REPOSITORY


def served_engine() -> tuple[str, Engine]:
    """The engine the shipped server runs, as perf.cpu_engines runs it in-process."""
    workers = available_cores()
    if serves_openvino():
        record = json.loads((OPENVINO_MODEL_DIR / "export.json").read_text())["openvino"]
        name = f"OpenVINO {record['precision']}"
        return name, openvino_engine(
            name, OPENVINO_MODEL_DIR / "model.xml", record["precision"], workers
        )
    return CEILING_ENGINE, ceiling_engine()


CEILING_ENGINE = "ONNX Runtime f32"


def ceiling_engine() -> Engine:
    return onnxruntime_engine(CEILING_ENGINE, ONNX_MODEL_DIR / "model.onnx")


@dataclass(frozen=True)
class InProcess:
    texts_per_s: float
    cpu_us_per_request: float


def in_process(engine: Engine, load: Workload) -> InProcess:
    batches = tokenize(serving_tokenizer(), load.requests)
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    rate = in_process_rate(engine, batches, available_cores())
    after, elapsed = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - started
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    # The warm-up runs count in both the CPU and the time: the share of CPU
    # per second of the run, spread over the texts it ran.
    requests_per_s = rate / load.texts_per_request
    return InProcess(rate, 1e6 * cpu_s / elapsed / requests_per_s)


def in_process_rates(engine: Engine, loads: Sequence[Workload]) -> dict[str, InProcess]:
    return {load.name: in_process(engine, load) for load in loads}


def rate_of(measured: InProcess) -> float:
    return measured.texts_per_s


def _at_level(target: Target, load: Workload, results: Path, label: str, level: int) -> Measurement:
    """One perf_analyzer run at `level` concurrent clients."""
    sweep = concurrency_sweep(
        target, load, results, label=label, concurrency=(level, level, 1), windows=WINDOWS
    )
    return sweep.best


def _label(setup: str) -> str:
    return setup.split(":")[0].replace(" ", "_")


def measure(servers: dict[str, RunningServer], load: Workload, results: Path) -> list[Served]:
    """Each level on every setup's server in turn, so that a drift of the
    machine touches them alike; then each setup's CPU per request at its
    best level, and the shipped one's over HTTP/JSON."""
    levels: dict[str, dict[int, Measurement]] = {setup: {} for setup in servers}
    for level in LEVELS:
        for setup, server in servers.items():
            target = Target(server.grpc_url, priority=BULK)
            label = f"{_label(setup)}_c{level}"
            levels[setup][level] = _at_level(target, load, results, label, level)
    served = []
    for setup, server in servers.items():
        best = max(levels[setup], key=lambda level: levels[setup][level].infer_per_sec)
        target = Target(server.grpc_url, priority=BULK)
        with cpu_per_request(server) as found:
            _at_level(target, load, results, f"{_label(setup)}_cpu", best)
        http_rate = None
        if setup == SETUPS[-1].name:
            # perf_analyzer sets no priority over HTTP: its requests wait at
            # the interactive level, whose bounded queue refuses more clients.
            level = min(best, interactive_queue_size())
            over_http = Target(server.http_url, protocol="http")
            label = f"{_label(setup)}_http"
            http_rate = _at_level(over_http, load, results, label, level).infer_per_sec
        served.append(Served(setup, load, levels[setup], found[0], http_rate))
    return served


def tokenizer_config() -> model_config_pb2.ModelConfig:
    return read_config(SHARED_REPOSITORY / "tokenizer" / "config.pbtxt")


def interactive_queue_size() -> int:
    """The tokenizer's queue bound at the interactive (default) level."""
    config = tokenizer_config()
    return config.dynamic_batching.priority_queue_policy[
        config.dynamic_batching.default_priority_level
    ].max_queue_size


@dataclass(frozen=True)
class GaugeReading:
    wall_us: float
    cpu_us: float  # in the reader; the server spends its own on top


def time_gauge_reading(server: RunningServer) -> GaugeReading:
    url = f"http://{server.endpoints.host}:{server.endpoints.metrics_port}/metrics"
    read_pending(url, "embedder")
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(GAUGE_READINGS):
        read_pending(url, "embedder")
    return GaugeReading(
        1e6 * (time.perf_counter() - wall) / GAUGE_READINGS,
        1e6 * (time.process_time() - cpu) / GAUGE_READINGS,
    )


def tokenizing_us(load: Workload) -> float:
    """CPU µs per request of the tokenizer stage's own work, in this
    process: encoding the request's texts and padding them."""
    tokenizer = serving_tokenizer()
    tokenize(tokenizer, load.requests)
    started = time.process_time()
    for _ in range(TOKENIZING_REPEATS):
        tokenize(tokenizer, load.requests)
    return 1e6 * (time.process_time() - started) / TOKENIZING_REPEATS / len(load.requests)


def _stage_us(stages: StageTimes) -> str:
    compute = stages.compute_input_us + stages.compute_infer_us + stages.compute_output_us
    return f"{stages.queue_us:.0f} | {compute:.0f}"


def _cores_busy(row: Served, cpu_us_per_request: float) -> float:
    """Cores the whole path kept busy at the best level's rate."""
    return cpu_us_per_request * row.best.infer_per_sec / row.load.texts_per_request / 1e6


def ceiling_markdown(served: Sequence[Served], ceiling: InProcess) -> list[str]:
    """The shipped query-8 over gRPC and HTTP/JSON against the in-process
    ONNX Runtime f32 ceiling."""
    (row,) = [
        row for row in served if row.setup == SETUPS[-1].name and row.load.name == CEILING_LOAD
    ]
    bf16 = this_processor().has_bf16
    target = f"target {CEILING_TARGET}x" if bf16 else "no target: the processor has no bfloat16"
    lines = [
        "",
        f"## Against the {CEILING_ENGINE} ceiling ({CEILING_LOAD})",
        "",
        f"perf.ceiling's layout: one single-thread {CEILING_ENGINE} session per core, in "
        f"this process, on the same requests: {ceiling.texts_per_s:.0f} texts/s ({target}).",
        "",
        "| shipped, best level | texts/s | / ceiling |",
        "|---|---|---|",
        f"| gRPC | {row.best.infer_per_sec:.0f} | "
        f"**{row.best.infer_per_sec / ceiling.texts_per_s:.2f}x** |",
    ]
    if row.http_texts_per_s is not None:
        lines.append(
            f"| HTTP/JSON, keep-alive | {row.http_texts_per_s:.0f} | "
            f"**{row.http_texts_per_s / ceiling.texts_per_s:.2f}x** |"
        )
    return lines


def render(
    engine: str,
    in_proc: dict[str, InProcess],
    served: Sequence[Served],
    gauge: GaugeReading,
    tokenizing: dict[str, float],
    ceiling: InProcess,
    in_proc_runs: tuple[dict[str, InProcess], dict[str, InProcess]],
) -> str:
    first, last = in_proc_runs
    lines = [
        "# The served path of a short request",
        "",
        f"Processor: {this_processor().describe()}.",
        "",
        f"Generated by `.venv/bin/python -m perf.served_path` in one run. The served engine: "
        f"{engine}; in-process, {available_cores()} workers (one per core) each with its own "
        "session or infer request of one thread, as perf.cpu_engines runs it, before and after "
        "the served runs, the higher rate kept ("
        + ", ".join(
            f"{name}: {first[name].texts_per_s:.0f} then {last[name].texts_per_s:.0f} texts/s"
            for name in first
        )
        + "). Served: the `embed` ensemble over gRPC at the bulk priority level, perf_analyzer "
        "on the same cores; every setup's server runs at once, and each level is measured on "
        "one after the other.",
        "",
        "## Served / in-process",
        "",
        "| setup | workload | "
        + " | ".join(f"c={level}" for level in LEVELS)
        + " | in-process | best / in-process |",
        "|---|---|" + "---|" * len(LEVELS) + "---|---|",
    ]
    for row in served:
        rates = " | ".join(f"{row.levels[level].infer_per_sec:.0f}" for level in LEVELS)
        inner = in_proc[row.load.name].texts_per_s
        lines.append(
            f"| {row.setup} | {row.load.name} | {rates} | {inner:.0f} | "
            f"**{row.best.infer_per_sec / inner:.2f}** |"
        )
    lines += [
        "",
        "## Each hop at one client (µs per request)",
        "",
        "Triton's statistics per stage (queue | compute: input + infer + output), the "
        "ensemble's own overhead, and the client's send, receive and network wait.",
        "",
        "| setup | workload | "
        + " | ".join(f"{stage} queue | {stage} compute" for stage in STAGES)
        + " | client send + receive | network | end to end p50 |",
        "|---|---|" + "---|---|" * len(STAGES) + "---|---|---|",
    ]
    for row in served:
        one = row.levels[1]
        stages = {c.model: c.stages for c in one.composing}
        cells = " | ".join(_stage_us(stages[stage]) for stage in STAGES)
        lines.append(
            f"| {row.setup} | {row.load.name} | {cells} | "
            f"{one.client_send_us + one.client_recv_us:.0f} | {one.network_us:.0f} | "
            f"{1000 * one.p50_ms:.0f} |"
        )
    lines += [
        "",
        "## CPU per request at the best level (µs)",
        "",
        "Each process's CPU time over a run at the best concurrency, per request answered. "
        "tritonserver holds the gRPC frontend, the ensemble scheduler and the C++ "
        "serializer; the embedder stubs are summed. In-process: the engine alone, all "
        "cores, per request of the workload.",
        "",
        "| setup | workload | "
        + " | ".join((*ROLES, "perf_analyzer"))
        + " | all | engine in-process | over the engine | cores busy |",
        "|---|---|" + "---|" * (len(ROLES) + 5),
    ]
    for row in served:
        cpu = row.cpu.microseconds()
        total = sum(cpu.values())
        engine_us = in_proc[row.load.name].cpu_us_per_request
        lines.append(
            f"| {row.setup} | {row.load.name} | "
            + " | ".join(f"{value:.0f}" for value in cpu.values())
            + f" | {total:.0f} | {engine_us:.0f} | {total - engine_us:.0f} | "
            f"{_cores_busy(row, total):.2f} of {available_cores()} |"
        )
    lines += ceiling_markdown(served, ceiling)
    lines += ["", f"## Against the target of {TARGET_RATIO}", ""]
    for row in [row for row in served if row.setup == SETUPS[-1].name]:
        ratio = row.best.infer_per_sec / in_proc[row.load.name].texts_per_s
        cpu = row.cpu.microseconds()
        engine_us = in_proc[row.load.name].cpu_us_per_request
        added = {
            "the embedder stubs beyond the engine": cpu["embedder stub"] - engine_us,
            **{role: value for role, value in cpu.items() if role != "embedder stub"},
        }
        parts = ", ".join(f"{name} {value:.0f}" for name, value in added.items())
        verdict = "met" if ratio >= TARGET_RATIO else "missed"
        busy = _cores_busy(row, sum(cpu.values()))
        lines.append(
            f"- {row.load.name}: {ratio:.2f}, {verdict}, best at c={row.best.load:.0f} "
            f"with {busy:.2f} of {available_cores()} cores busy. Per request the engine takes "
            f"{engine_us:.0f} µs of CPU in-process; the served path adds {parts} (µs). At "
            f"{TARGET_RATIO} the path may add {engine_us * (1 / TARGET_RATIO - 1):.0f}. Of the "
            f"tokenizer stub's {cpu['tokenizer stub']:.0f}, encoding and padding the texts "
            f"take {tokenizing[row.load.name]:.0f} in-process; the rest is the Python "
            "backend's exchange with tritonserver and the stage's Python per request."
        )
    lines += [
        "",
        "## Other hops",
        "",
        f"- One reading of the embedder's backlog from Triton's metrics endpoint: "
        f"{gauge.wall_us:.0f} µs wall, {gauge.cpu_us:.0f} µs of CPU in the reader (the "
        "server spends its own to render the metrics). Before, the tokenizer took one at "
        "every execute; now one when its estimate nears the limit or is older than "
        "model_common.admission.READING_MAX_AGE_S.",
    ]
    parameters = tokenizer_config().parameters
    seconds = float(parameters["max_embedder_backlog_seconds"].string_value)
    for load in {row.load.name: row.load for row in served}.values():
        limit = BacklogLimit(
            seconds=seconds,
            requests=int(parameters["max_embedder_backlog"].string_value),
            cpus=available_cores(),
        )
        tokens = load.mean_tokens * load.texts_per_request
        limit.released(1, round(tokens))
        # The embedder's speed as it measures it, tokens per CPU second: here
        # the engine's in-process one, over one window's worth of requests.
        engine_cpu_s = in_proc[load.name].cpu_us_per_request / 1e6
        requests = math.ceil(WINDOW_CPU_S / engine_cpu_s)
        limit.worked(round(tokens * requests), engine_cpu_s * requests)
        lines.append(
            f"- {load.name}: the shipped door holds new requests while {limit.value()} wait in "
            f"the embedder ({tokens:.0f} tokens each; {seconds} s of work is {limit.tokens()} "
            f"tokens at the engine's in-process speed); before, {REQUESTS_BEFORE}."
        )
    for row in served:
        if row.http_texts_per_s is not None:
            grpc_rate = row.best.infer_per_sec
            lines.append(
                f"- {row.load.name}, {row.setup.split(':')[0]}: over HTTP/JSON at the best "
                f"level {row.http_texts_per_s:.0f} texts/s, gRPC {grpc_rate:.0f} "
                f"({row.http_texts_per_s / grpc_rate:.2f}x)."
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=REPO_ROOT / "perf" / "results" / "local")
    args = parser.parse_args(argv)
    results = args.results / "served_path"
    results.mkdir(parents=True, exist_ok=True)
    loads = [workload(kind, count) for kind, count in WORKLOADS]
    engine_name, engine = served_engine()
    (ceiling_load,) = [load for load in loads if load.name == CEILING_LOAD]
    first = in_process_rates(engine, loads)
    served: list[Served] = []
    with tempfile.TemporaryDirectory(prefix="served_path_") as work, ExitStack() as stack:
        servers = {}
        for index, setup in enumerate(SETUPS):
            # No spaces: the Python backend's stub takes its model's path unquoted.
            workdir = Path(work) / f"setup{index}"
            workdir.mkdir()
            repositories = [setup.repository(workdir)] if setup.repository else None
            servers[setup.name] = stack.enter_context(
                running_server(workdir / "tritonserver.log", repositories)
            )
        for load in loads:
            served += measure(servers, load, results)
        gauge = time_gauge_reading(servers[SETUPS[-1].name])
    # The engine's rate alone, before and after the served runs: the higher
    # one is kept, so a slow moment of the machine never flatters the path.
    last = in_process_rates(engine, loads)
    in_proc = {name: max(first[name], last[name], key=rate_of) for name in first}
    ceiling = max(
        in_process(ceiling_engine(), ceiling_load),
        in_process(ceiling_engine(), ceiling_load),
        key=rate_of,
    )
    write_report(
        args.results / "served_path.md",
        render(
            engine_name,
            in_proc,
            served,
            gauge,
            {load.name: tokenizing_us(load) for load in loads},
            ceiling,
            (first, last),
        ),
    )


if __name__ == "__main__":
    main()
