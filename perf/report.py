"""The whole performance report in one command: perf_analyzer sweeps of the
shipped ensemble, the in-process ceiling and serving efficiency, the
ablation (a)-(e), capacity at p99 targets with the dynamic batcher's queue
delay chosen from them, client-side cost, and the plain, fused and int8
graphs compared (perf/graphs.py); CSVs, PNG plots and report.md under
perf/results/<machine>/.

    .venv/bin/python -m perf.report [--results perf/results/debian12-2core]

It starts its own servers on free loopback ports, one after the other, and
takes about 30 minutes on 2 cores; nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tritonclient.grpc import model_config_pb2

from harness.priority import BULK
from harness.repository import ConfigEdit, read_config, repository_variant
from harness.server import RunningServer, running_server
from perf.ablation import AblationRow, ablation_table, naive_repository, run_ablation
from perf.capacity import RatePoint, capacity_at, capacity_table, rate_points_table, rate_sweep
from perf.ceiling import Ceiling, ceiling
from perf.client_cost import client_cost_table, measure_client_cost
from perf.graphs import graph_comparison
from perf.perf_analyzer import Measurement, PerfAnalyzerError, run_perf_analyzer
from perf.plots import plot_stage_breakdown, plot_throughput_vs_p99
from perf.sweep import (
    SweepResult,
    Target,
    Windows,
    concurrency_sweep,
    input_data,
    poisson_rates,
    request_rate_sweep,
)
from perf.workloads import Workload, workload
from server.paths import ONNX_MODEL_DIR, ONNX_RUNTIME_REPOSITORIES, REPO_ROOT

# Loose stability: the 2 cores are shared with perf_analyzer itself.
WINDOWS = Windows(measurement_ms=4000, stability_percentage=50.0, max_trials=10)
SWEEP_CONCURRENCY = {1: (1, 7, 3), 8: (1, 7, 3), 32: (1, 3, 2)}
# A long-32 request takes about 2.5 s here: its Poisson sweep alone would
# take longer than the rest of the report; it gets the in-process ceiling.
UNSWEPT = ("long-32",)
ABLATION_CONCURRENCY = {"short": 8, "long": 4}
# A long 8-text request takes about 2 s here: a 4 s window holds too few to
# stabilize, so long cells count 16 requests per window instead.
ABLATION_WINDOWS = {
    "short": WINDOWS,
    "long": Windows(measurement_requests=16, stability_percentage=50.0, max_trials=10),
}
CAPACITY_TARGETS_MS = {"short": (50.0, 100.0, 250.0), "long": (250.0, 500.0, 1000.0)}
# Queue delays (µs) tried for the shipped embedder; the best capacity at
# the middle short target is written back into its config.pbtxt by hand.
QUEUE_DELAYS_US = (0, 2000, 8000)
PEAK_CONCURRENCY = 8
CEILING_SECONDS = 6.0


def machine_name() -> str:
    release = dict(
        line.split("=", 1) for line in Path("/etc/os-release").read_text().split() if "=" in line
    )
    distro = release.get("ID", "linux").strip('"') + release.get("VERSION_ID", "").strip('"')
    return f"{distro}-{len(os.sched_getaffinity(0))}core"


def shipped_queue_delay_us() -> int:
    config = read_config(ONNX_MODEL_DIR.parent / "config.pbtxt")
    if not config.HasField("dynamic_batching"):
        raise ValueError("the shipped embedder config declares no dynamic_batching")
    return config.dynamic_batching.max_queue_delay_microseconds


def _queue_delay(delay_us: int) -> ConfigEdit:
    def edit(config: model_config_pb2.ModelConfig) -> None:
        # Setting a field of an absent dynamic_batching would add one.
        if not config.HasField("dynamic_batching"):
            raise ValueError("the embedder config declares no dynamic_batching")
        config.dynamic_batching.max_queue_delay_microseconds = delay_us

    edit.__name__ = f"queue_delay({delay_us})"
    return edit


@dataclass(frozen=True)
class Served:
    """The shipped ensemble's sweeps by workload name, what failed, and the
    in-process ceiling of every workload."""

    closed: dict[str, SweepResult]
    opened: dict[str, SweepResult]
    failures: dict[str, str]
    ceilings: dict[str, Ceiling]


def measure_shipped(server: RunningServer, loads: Sequence[Workload], results: Path) -> Served:
    target = Target(url=server.grpc_url, priority=BULK)
    closed: dict[str, SweepResult] = {}
    opened: dict[str, SweepResult] = {}
    failures: dict[str, str] = {}
    for load in loads:
        if load.name in UNSWEPT:
            continue
        # One failed sweep is reported, not allowed to void the run.
        try:
            closed[load.name] = concurrency_sweep(
                target,
                load,
                results,
                label="embed",
                concurrency=SWEEP_CONCURRENCY[load.texts_per_request],
                windows=WINDOWS,
            )
            opened[load.name] = request_rate_sweep(
                target,
                load,
                results,
                label="embed",
                rates=poisson_rates(closed[load.name].best.requests_per_sec),
            )
        except PerfAnalyzerError as error:
            failures[load.name] = str(error).splitlines()[-1]
    model = ONNX_MODEL_DIR / "model.onnx"
    ceilings = {load.name: ceiling(model, load, CEILING_SECONDS) for load in loads}
    return Served(closed, opened, failures, ceilings)


def efficiency_table(served: Served, loads: Sequence[Workload]) -> str:
    lines = [
        "| workload | mean tokens/text | served texts/s (best concurrency) | served tokens/s "
        "| in-process texts/s | in-process tokens/s | in-process layout | efficiency |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for load in loads:
        roof = served.ceilings[load.name]
        in_process = f"{roof.sentences_per_s:.1f} | {roof.tokens_per_s:.0f} | {roof.configuration}"
        swept = served.closed.get(load.name)
        if swept is None:
            why = served.failures.get(load.name, "not swept (see UNSWEPT in perf/report.py)")
            lines.append(f"| {load.name} | {load.mean_tokens:.0f} | {why} | | {in_process} | |")
            continue
        best = swept.best
        lines.append(
            f"| {load.name} | {load.mean_tokens:.0f} | {best.sentences_per_sec:.1f} "
            f"(c={best.load:g}) | {best.tokens_per_sec(load.mean_tokens):.0f} | {in_process} | "
            f"{best.sentences_per_sec / roof.sentences_per_s:.0%} |"
        )
    return "\n".join(lines) + "\n"


def sweep_tables(served: Served) -> str:
    lines = [
        "| workload | load | texts/s | tokens/s | p50 ms | p99 ms | server queue ms "
        "| server compute ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in (*served.closed.values(), *served.opened.values()):
        load = result.workload
        for m in result.measurements:
            level = f"c={m.load:g}" if result.mode == "concurrency" else f"{m.load:g} req/s"
            compute = m.server.total_us - m.server.queue_us
            lines.append(
                f"| {load.name} | {level} | {m.sentences_per_sec:.1f} | "
                f"{m.tokens_per_sec(load.mean_tokens):.0f} | {m.p50_ms:.0f} | "
                f"{m.p99_ms:.0f} | {m.server.queue_us / 1000:.1f} | {compute / 1000:.1f} |"
            )
    return "\n".join(lines) + "\n"


def stage_table(measurements: dict[str, Measurement]) -> str:
    lines = [
        "| configuration | model | queue ms | compute input ms | compute infer ms "
        "| compute output ms |",
        "|---|---|---|---|---|---|",
    ]
    for label, m in measurements.items():
        steps = [(step.model, step.stages) for step in m.composing] or [("(model)", m.server)]
        for model, stages in steps:
            lines.append(
                f"| {label} | {model} | {stages.queue_us / 1000:.2f} | "
                f"{stages.compute_input_us / 1000:.2f} | {stages.compute_infer_us / 1000:.2f} | "
                f"{stages.compute_output_us / 1000:.2f} |"
            )
    return "\n".join(lines) + "\n"


def capacity_sweeps(
    server: RunningServer,
    model: str,
    protocol: Literal["grpc", "http"],
    load: Workload,
    results: Path,
    label: str,
) -> list[RatePoint]:
    """Poisson rates up to the closed-loop peak at PEAK_CONCURRENCY."""
    url = server.http_url if protocol == "http" else server.grpc_url
    data = input_data(Target(url=url), load)
    try:
        (peak,) = run_perf_analyzer(
            model,
            url,
            protocol,
            data,
            results / f"capacity_{label}_{load.name}_peak.csv",
            batch_size=load.texts_per_request,
            concurrency=(PEAK_CONCURRENCY, PEAK_CONCURRENCY, 1),
            measurement_ms=WINDOWS.measurement_ms,
            priority=BULK if protocol == "grpc" else None,
            stability_percentage=WINDOWS.stability_percentage,
            max_trials=WINDOWS.max_trials,
        )
    except PerfAnalyzerError as error:
        # No peak, no rates to sweep: reported as a rate of 0 never held.
        return [RatePoint(0.0, None, f"closed-loop peak: {str(error).splitlines()[-1]}")]
    return rate_sweep(
        model,
        url,
        protocol,
        data,
        results / f"capacity_{label}_{load.name}",
        load.texts_per_request,
        peak.requests_per_sec,
    )


def measure_capacity(
    workdir: Path, results: Path, loads: Sequence[Workload]
) -> tuple[dict[str, dict[str, list[RatePoint]]], int]:
    """Per workload kind, the naive server's and each queue delay's rate
    sweeps; and the delay with the highest capacity at the middle short target."""
    sweeps: dict[str, dict[str, list[RatePoint]]] = {load.kind: {} for load in loads}
    with running_server(workdir / "naive.log", [naive_repository(workdir / "capacity_naive")]) as s:
        for load in loads:
            sweeps[load.kind]["(a) naive, HTTP JSON"] = capacity_sweeps(
                s, "naive_json", "http", load, results, "naive"
            )
    shipped_delay = shipped_queue_delay_us()
    for delay in QUEUE_DELAYS_US:
        repositories = (
            ONNX_RUNTIME_REPOSITORIES
            if delay == shipped_delay
            else [
                repository_variant(
                    workdir / f"delay_{delay}",
                    {"embedder": _queue_delay(delay)},
                    ONNX_RUNTIME_REPOSITORIES,
                )
            ]
        )
        with running_server(workdir / f"delay_{delay}.log", repositories) as s:
            for load in loads:
                if load.kind != "short" and delay != QUEUE_DELAYS_US[1]:
                    continue
                sweeps[load.kind][f"(d) shipped, embedder queue delay {delay} µs"] = (
                    capacity_sweeps(s, "embed", "grpc", load, results, f"delay{delay}")
                )
    target = CAPACITY_TARGETS_MS["short"][1]
    short = sweeps["short"]
    best_delay = max(
        QUEUE_DELAYS_US,
        key=lambda d: (capacity_at(short[f"(d) shipped, embedder queue delay {d} µs"], target), -d),
    )
    return sweeps, best_delay


def write_plots(
    results: Path,
    capacity: dict[str, dict[str, list[RatePoint]]],
    ablation: Sequence[AblationRow],
) -> list[Path]:
    paths = []
    for kind, sweeps in capacity.items():
        series = {
            name: [point.measurement for point in points if point.measurement is not None]
            for name, points in sweeps.items()
        }
        series = {name: points for name, points in series.items() if points}
        paths.append(
            plot_throughput_vs_p99(
                series,
                f"{kind} texts, 1 per request, Poisson arrivals: throughput against p99",
                results / f"throughput_vs_p99_{kind}.png",
            )
        )
    for kind in ("short", "long"):
        measurements = {
            f"({row.step.key}) {row.step.model}": row.measurement
            for row in ablation
            if row.workload.kind == kind and row.measurement is not None
        }
        paths.append(
            plot_stage_breakdown(
                measurements,
                f"server time per request by stage, ablation, {kind} texts",
                results / f"stage_breakdown_{kind}.png",
            )
        )
    return paths


def _capacity_text(capacity: dict[str, dict[str, list[RatePoint]]], best_delay: int) -> str:
    text = ""
    for kind in capacity:
        text += (
            f"**{kind} texts, 1 per request**, Poisson arrivals; the highest offered rate "
            "held with p99 within the target and no failed request, "
            "counting only rates below the first one missed. Sent at the default, interactive "
            "priority level, so a request its queue deadline sheds counts as failed; the "
            "rates are fractions of the closed-loop peak at concurrency "
            f"{PEAK_CONCURRENCY} (bulk level):\n\n"
        )
        text += capacity_table(capacity[kind], CAPACITY_TARGETS_MS[kind], 1)
        text += "\n"
    text += (
        f"Chosen for the shipped embedder: `max_queue_delay_microseconds: {best_delay}` "
        f"(highest capacity at p99 <= {CAPACITY_TARGETS_MS['short'][1]:g} ms on short texts, "
        "ties to the shorter delay); no preferred batch size (measured in "
        "perf/results/debian12-2core/batching_choices.md).\n\nEvery rate measured:\n\n"
    )
    text += "".join(rate_points_table(sweeps) + "\n" for sweeps in capacity.values())
    return text


def render(
    results: Path,
    served: Served,
    ablation: Sequence[AblationRow],
    capacity: dict[str, dict[str, list[RatePoint]]],
    best_delay: int,
    client_costs: str,
    graphs: str,
    plots: Sequence[Path],
    loads: Sequence[Workload],
) -> str:
    cores = len(os.sched_getaffinity(0))
    section: Callable[[str], str] = lambda title: f"\n## {title}\n\n"  # noqa: E731
    text = "# Performance report\n\n"
    text += (
        f"Regenerated by `.venv/bin/python -m perf.report` on {platform.machine()}, {cores} cores "
        "shared by tritonserver and perf_analyzer (and the in-process runs, alone); model "
        "all-MiniLM-L6-v2 (6 layers, 384 dims, max 256 tokens) exported to ONNX, served by the "
        "ONNX Runtime embedder (`onnx_cpu/`); the CPU engines, the default OpenVINO one among "
        "them, are compared in cpu_engines.md (`python -m perf.cpu_engines`). Texts: "
        "`perf/workloads.py`, cut from Python's pydoc_data prose; 'long' texts are cut at "
        "512 tokens and truncated by the model at 256. perf_analyzer 2.60 (async, "
        f"{WINDOWS.measurement_ms} ms windows, stability {WINDOWS.stability_percentage:g}%); "
        "its CSVs (with `--verbose-csv`, and each composing model's) and logs are beside "
        "this file.\n\n"
        "| workload | texts/request | mean tokens/text (after truncation) | before truncation |\n"
        "|---|---|---|---|\n"
    )
    text += "".join(
        f"| {load.name} | {load.texts_per_request} | {load.mean_tokens:.1f} | "
        f"{load.mean_untruncated_tokens:.1f} |\n"
        for load in loads
    )
    text += section("Serving efficiency: served against the in-process ceiling")
    text += (
        "The ceiling runs the same ONNX graph in this process under ONNX Runtime on the same "
        "requests (each padded to its own longest text, as the tokenizer stage does), "
        "tokenization excluded, in the better of two layouts (sessions x threads). "
        "Efficiency = served texts/s at the best swept concurrency / in-process texts/s.\n\n"
    )
    text += efficiency_table(served, loads)
    text += section("Sweeps of the shipped `embed` ensemble (gRPC)")
    text += (
        "Concurrency range (closed loop), then Poisson arrivals at fractions of its best "
        "request rate, at the bulk priority level (its queues wait; the interactive level "
        "sheds after 1-2 s in a queue). Server times are per request, summed over the "
        "ensemble's steps.\n\n"
    )
    text += sweep_tables(served)
    text += section("Ablation: one change per step, same texts, one run")
    text += (
        f"Concurrency {ABLATION_CONCURRENCY['short']} (short) and "
        f"{ABLATION_CONCURRENCY['long']} (long) requests of 8 texts; long cells measure "
        f"windows of {ABLATION_WINDOWS['long'].measurement_requests} requests. Step (a) sends the "
        "embeddings as JSON float lists made in the model (`json.dumps` per row, what an "
        "HTTP/JSON embedding API does); perf_analyzer cannot ask Triton for JSON output "
        "itself. Step (e) sends ids tokenized beforehand, so its client-side tokenization "
        "cost is not in the numbers.\n\n"
    )
    text += ablation_table(ablation)
    text += "\nServer time per request by composing model (same runs):\n\n"
    text += stage_table(
        {
            f"({row.step.key}) {row.workload.kind}": row.measurement
            for row in ablation
            if row.measurement is not None
        }
    )
    text += section("Capacity at a p99 target")
    text += _capacity_text(capacity, best_delay)
    text += section("Client-side cost per output format")
    text += client_costs
    text += section("A faster model: plain, fused and int8 graphs")
    text += (
        "`export/export_onnx.py --graph {plain,fused,int8}`: the exporter's graph; ONNX "
        "Runtime's transformer fusions (float32); the fused graph with int8 weights and "
        "dynamically quantized activations (opt-in). Cosines are to sentence-transformers on "
        "the original weights.\n\n"
    )
    text += graphs
    text += section("Plots")
    text += "".join(f"![{path.stem}]({path.name})\n\n" for path in plots)
    return text


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--results", type=Path, default=REPO_ROOT / "perf" / "results" / machine_name()
    )
    args = parser.parse_args(argv)
    results: Path = args.results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    for stale in (*results.glob("*.csv"), *results.glob("*.log"), *results.glob("*.png")):
        stale.unlink()
    loads = [workload(kind, count) for kind in ("short", "long") for count in (1, 8, 32)]
    by_name = {load.name: load for load in loads}
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="perf_report_") as temporary:
        workdir = Path(temporary)
        with running_server(workdir / "shipped.log", ONNX_RUNTIME_REPOSITORIES) as server:
            served = measure_shipped(server, loads, results)
            client_costs = client_cost_table(measure_client_cost(server.grpc_url))
        ablation = run_ablation(
            workdir,
            results,
            [by_name["short-8"], by_name["long-8"]],
            ABLATION_CONCURRENCY,
            cores,
            ABLATION_WINDOWS,
        )
        capacity, best_delay = measure_capacity(
            workdir, results, [by_name["short-1"], by_name["long-1"]]
        )
        graphs = graph_comparison(workdir, results, CEILING_SECONDS)
    plots = write_plots(results, capacity, ablation)
    report = render(
        results, served, ablation, capacity, best_delay, client_costs, graphs, plots, loads
    )
    (results / "report.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
