"""The GPU report: markdown from the results.json files of one or more GPU
runs (perf/gpu/run.py), beside the published anchors. Each run is named by
its file's stem, so runs made with different code stay apart.

    python -m perf.gpu.report RUN.json [RUN.json ...] --output perf/results/<gpu>/report.md
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf.gpu.inprocess_report import (
    best_host_to_host,
    in_process_lines,
    markdown_table,
    share_text,
    tokens_text,
)
from perf.gpu.models import SHAPES, dense_peak_flops

P99_TARGET_MS = 100.0
# Snowflake's Arctic embedding work, H200, snowflake-arctic-embed-m-v1.5
# (BERT-base), tokens/s: (server, 50-token inputs, 512-token inputs).
ANCHORS = (
    ("vLLM (before Snowflake's fixes)", 93e3, 386e3),
    ("HuggingFace TEI", 618e3, 1.62e6),
    ("Arctic Inference (bytes out, tokenization disaggregated, replicas per GPU)", 1.41e6, 1.64e6),
)
GOAL = (1.6e6, 2.0e6)

Run = tuple[str, dict[str, Any]]  # (name, results.json)


def _entry_point(sweep: dict[str, Any]) -> str:
    """The model a sweep sent to: runs before the `tokens` option swept only `embed`."""
    return str(sweep.get("model", "embed"))


@dataclass(frozen=True)
class Point:
    """One measured concurrency level of one served sweep."""

    run: str
    served: dict[str, Any]
    sweep: dict[str, Any]
    measurement: dict[str, Any]

    @property
    def shape(self) -> str:
        return str(self.served["setup"]["shape"])

    @property
    def kind(self) -> str:
        return str(self.sweep["workload"]).split("-")[0]

    @property
    def model(self) -> str:
        return _entry_point(self.sweep)

    @property
    def tokens_per_s(self) -> float:
        return float(self.measurement["infer_per_sec"]) * float(self.sweep["mean_tokens"])


def _points(runs: Sequence[Run]) -> Iterator[Point]:
    for name, results in runs:
        for served in results["served"]:
            for sweep in served["sweeps"]:
                for measurement in sweep["measurements"]:
                    yield Point(name, served, sweep, measurement)


def _peak(runs: Sequence[Run]) -> float | None:
    """The GPU's dense float16 peak; None for a run on CPU instances."""
    gpu = runs[0][1]["environment"].get("gpu")
    return dense_peak_flops(gpu) if gpu else None


def _mfu(tokens_per_s: float, shape: str, mean_tokens: float, peak: float | None) -> str:
    if peak is None:
        return "n/a"
    return f"{tokens_per_s * SHAPES[shape].flops_per_token(mean_tokens) / peak:.1%}"


def _gpu_utilization(measurement: dict[str, Any]) -> str:
    values = measurement["gpu_metrics"].get("Avg GPU Utilization", {})
    return " / ".join(f"{value:.0%}" for value in values.values()) or "n/a"


def _stage(measurement: dict[str, Any], model: str) -> dict[str, float] | None:
    for composing in measurement["composing"]:
        if composing["model"] == model:
            return composing["stages"]
    return None


def best_served(runs: Sequence[Run], shape: str, kind: str) -> Point | None:
    """The served level of `embed` with the most tokens/s: texts in, as the
    anchors measure."""
    candidates = [
        point
        for point in _points(runs)
        if point.shape == shape and point.kind == kind and point.model == "embed"
    ]
    return max(candidates, key=lambda point: point.tokens_per_s) if candidates else None


def _in_process(runs: Sequence[Run]) -> dict[str, Any] | None:
    measured = [results["in_process"] for _, results in runs if "in_process" in results]
    return measured[-1] if measured else None


def anchor_table(runs: Sequence[Run]) -> list[str]:
    peak = _peak(runs)
    gpu = runs[0][1]["environment"].get("gpu", "CPU")
    lines = [
        "| server | GPU | 50-token inputs | 512-token inputs |",
        "|---|---|---|---|",
        *(
            f"| {name} | H200 | ~{tokens_text(short)} | ~{tokens_text(long)} |"
            for name, short, long in ANCHORS
        ),
        f"| goal of this project | H200 | >= {tokens_text(GOAL[0])} | >= {tokens_text(GOAL[1])} |",
    ]
    cells = []
    for kind in ("short", "long"):
        point = best_served(runs, "bert-base", kind)
        cells.append(
            "not measured"
            if point is None
            else f"{tokens_text(point.tokens_per_s)} (MFU "
            f"{_mfu(point.tokens_per_s, 'bert-base', point.sweep['mean_tokens'], peak)}; "
            f"{point.run} {point.served['name']}, concurrency {point.measurement['load']:g}, "
            f"p99 {point.measurement['p99_ms']:.0f} ms)"
        )
    lines.append(
        f"| **this project, served** (gRPC, raw bytes out; BERT-base shape) | {gpu} "
        f"| {cells[0]} | {cells[1]} |"
    )
    in_process = _in_process(runs)
    cells = []
    for length in (50, 512):
        best = best_host_to_host(in_process, "bert-base", length)
        cells.append(
            "not measured"
            if best is None
            else f"{tokens_text(best[0])} (MFU {share_text(best[1])}; {best[2]} per forward)"
        )
    lines.append(
        f"| this project, the encoder in process (no server; BERT-base shape) | {gpu} "
        f"| {cells[0]} | {cells[1]} |"
    )
    return lines


def runs_table(runs: Sequence[Run]) -> list[str]:
    def setups(results: dict[str, Any]) -> str:
        names = ", ".join(served["name"] for served in results["served"]) or "none"
        return f"in-process; {names}" if "in_process" in results else names

    return markdown_table(
        ("run", "started", "kit", "setups", "failed steps"),
        (
            (
                name,
                results["environment"]["started"],
                results["environment"].get("kit", "not recorded"),
                setups(results),
                len(results["errors"]),
            )
            for name, results in runs
        ),
    )


def summary_table(runs: Sequence[Run]) -> list[str]:
    """Per setup and workload: the best level, and the best within the p99 target."""
    peak = _peak(runs)
    lines = [
        f"| run | setup | workload | entry point | best tokens/s (MFU) | its p50 / p99 ms "
        f"| best with p99 <= {P99_TARGET_MS:g} ms | its p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, results in runs:
        for served in results["served"]:
            for sweep in served["sweeps"]:
                points = [Point(name, served, sweep, m) for m in sweep["measurements"]]
                if not points:
                    lines.append(
                        f"| {name} | {served['name']} | {sweep['workload']} "
                        f"| {_entry_point(sweep)} | not measured | | | |"
                    )
                    continue
                best = max(points, key=lambda point: point.tokens_per_s)
                within = [p for p in points if p.measurement["p99_ms"] <= P99_TARGET_MS]
                cells = [
                    name,
                    served["name"],
                    sweep["workload"],
                    _entry_point(sweep),
                    f"{tokens_text(best.tokens_per_s)} "
                    f"({_mfu(best.tokens_per_s, best.shape, sweep['mean_tokens'], peak)}) "
                    f"at concurrency {best.measurement['load']:g}",
                    f"{best.measurement['p50_ms']:.1f} / {best.measurement['p99_ms']:.1f}",
                ]
                if within:
                    target = max(within, key=lambda point: point.tokens_per_s)
                    cells += [
                        f"{tokens_text(target.tokens_per_s)} at concurrency "
                        f"{target.measurement['load']:g}",
                        f"{target.measurement['p50_ms']:.1f} / {target.measurement['p99_ms']:.1f}",
                    ]
                else:
                    cells += ["none of the levels", ""]
                lines.append("| " + " | ".join(cells) + " |")
    return lines


def entry_point_table(runs: Sequence[Run]) -> list[str]:
    """Per setup and workload swept through both entry points: the best
    tokens/s of each, and the share of the throughput with ids in that
    tokenizing on the server costs."""
    best: dict[tuple[str, str, str], dict[str, float]] = {}
    for point in _points(runs):
        models = best.setdefault((point.run, point.served["name"], point.sweep["workload"]), {})
        models[point.model] = max(models.get(point.model, 0.0), point.tokens_per_s)
    rows = [
        (
            run,
            setup,
            workload,
            tokens_text(models["embed"]),
            tokens_text(models["embed_tokens"]),
            f"{1 - models['embed'] / models['embed_tokens']:.0%}",
        )
        for (run, setup, workload), models in best.items()
        if {"embed", "embed_tokens"} <= models.keys()
    ]
    if not rows:
        return ["No setup in these runs was swept through both entry points."]
    return markdown_table(
        (
            "run",
            "setup",
            "workload",
            "best tokens/s, embed (texts in)",
            "best tokens/s, embed_tokens (ids in)",
            "tokenizer's share (1 - embed / embed_tokens)",
        ),
        rows,
    )


def check_table(runs: Sequence[Run]) -> list[str]:
    return markdown_table(
        (
            "run",
            "setup",
            "device",
            "texts",
            "min cosine to sentence-transformers (float32, same weights)",
        ),
        (
            (
                name,
                served["name"],
                served["device"],
                served["check"]["texts"],
                f"{served['check']['min_cosine']:.6f}",
            )
            for name, results in runs
            for served in results["served"]
        ),
    )


def loading_table(runs: Sequence[Run]) -> list[str]:
    """Per served setup, its embedder instances' load-time lines."""

    def each(entries: list[dict[str, Any]], key: str, unit: str) -> str:
        return (
            " / ".join(f"{entry[key]:g}" for entry in entries) + f" {unit}" if entries else "none"
        )

    rows = []
    for name, results in runs:
        for served in results["served"]:
            loading = served.get("loading")
            if loading is None:
                rows.append((name, served["name"], "not recorded", "not recorded", "not recorded"))
                continue
            rows.append(
                (
                    name,
                    served["name"],
                    each(loading["warm_up"], "seconds", "s"),
                    each(loading["capture"], "seconds", "s"),
                    each(loading["capture"], "mib", "MiB"),
                )
            )
    return [
        "Each embedder instance logs its warm-up forward at load (on CUDA it compiles the "
        "encoder's blocks) and, where its config names token buckets (as shipped since run6; "
        "the `-graphs` setups before), its CUDA-graph capture; none: no such line.",
        "",
        *markdown_table(
            (
                "run",
                "setup",
                "warm-up forward, per instance",
                "CUDA-graph capture, per instance",
                "graph memory, per instance",
            ),
            rows,
        ),
    ]


def _host_cpu(measurement: dict[str, Any]) -> str:
    """perf.process_cpu's figures, in its order; runs before it: n/a."""
    cpu = measurement.get("cpu_us_per_request")
    return ", ".join(f"{value:.0f}" for value in cpu.values()) if cpu else "n/a"


def _sweep_rows(points: list[Point], peak: float | None) -> list[str]:
    lines = [
        "| concurrency | texts/s | tokens/s | MFU | p50 ms | p99 ms | GPU util "
        "| tokenizer queue+compute µs | embedder queue µs | embedder compute µs "
        "| host CPU µs/request: tritonserver, tokenizer, embedder, client |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for point in points:
        measurement = point.measurement
        tokenizer = _stage(measurement, "tokenizer")
        embedder = _stage(measurement, "embedder")
        tokenizer_us = (
            f"{tokenizer['queue_us'] + tokenizer['compute_infer_us']:.0f}" if tokenizer else "n/a"
        )
        queue_us = f"{embedder['queue_us']:.0f}" if embedder else "n/a"
        compute_us = (
            f"{embedder['compute_input_us'] + embedder['compute_infer_us'] + embedder['compute_output_us']:.0f}"
            if embedder
            else "n/a"
        )
        mfu = _mfu(point.tokens_per_s, point.shape, point.sweep["mean_tokens"], peak)
        lines.append(
            f"| {measurement['load']:g} | {measurement['infer_per_sec']:.0f} "
            f"| {tokens_text(point.tokens_per_s)} | {mfu} | {measurement['p50_ms']:.1f} "
            f"| {measurement['p99_ms']:.1f} | {_gpu_utilization(measurement)} | {tokenizer_us} "
            f"| {queue_us} | {compute_us} | {_host_cpu(measurement)} |"
        )
    return lines


def sweep_tables(runs: Sequence[Run]) -> list[str]:
    peak = _peak(runs)
    lines = []
    for name, results in runs:
        for served in results["served"]:
            for sweep in served["sweeps"]:
                lines += [
                    "",
                    f"#### {name}: {served['name']}, {sweep['workload']} through "
                    f"{_entry_point(sweep)} ({sweep['texts_per_request']} texts of "
                    f"~{sweep['mean_tokens']:.0f} tokens per request)",
                    "",
                ]
                for failed in sweep["errors"]:
                    message = " ".join(failed["error"].split())[-300:]
                    lines += [f"Concurrency {failed['concurrency']} not measured: `{message}`", ""]
                points = [Point(name, served, sweep, m) for m in sweep["measurements"]]
                if points:
                    lines += _sweep_rows(points, peak)
    return lines


def error_lines(runs: Sequence[Run]) -> list[str]:
    lines = []
    for name, results in runs:
        for error in results["errors"]:
            lines += [
                f"- {name}, {error['step']}:",
                "",
                "```",
                error["error"].strip()[-1500:],
                "```",
            ]
    return ["", "## Steps that failed", "", *lines] if lines else []


def headline(runs: Sequence[Run]) -> str:
    """The anchor and summary tables: what the run prints last."""
    return "\n".join([*anchor_table(runs), "", *summary_table(runs)]) + "\n"


def render(runs: Sequence[Run]) -> str:
    environment = runs[0][1]["environment"]
    lines = [
        "# GPU serving: the ensemble with the PyTorch embedder on a real Triton",
        "",
        f"Measured on {environment.get('nvidia_smi') or environment['device']} with "
        f"{environment['cpu_cores']} CPU cores, Python {environment['python']}, torch "
        f"{environment['torch']} (CUDA {environment.get('cuda')}), Triton 2.51 (the "
        "nvidia-pytriton wheel's server, carried by the GPU kit).",
        "",
        "Produced by `scripts/gpu_kit.sh pack` on the CPU machine and `scripts/gpu_kit.sh run` "
        "on the GPU machine (perf/gpu/), one run per call; this file is "
        "`python -m perf.gpu.report` over the runs' results (the JSON files beside it, with "
        "their server and perf_analyzer logs).",
        "",
        "**Random weights.** No model hub is reachable from the GPU machine, so both shapes are "
        "BERT encoders with transformers' random initialization: all-MiniLM-L6-v2's shape "
        "(6 layers, hidden 384) and the anchors' BERT-base shape (12 layers, hidden 768, as "
        "snowflake-arctic-embed-m-v1.5). Throughput does not depend on weight values; every "
        "served setup is checked against sentence-transformers on the same weights. Both shapes "
        "run at a 512-token max length (the served all-MiniLM-L6-v2 truncates at 256).",
        "",
        "Served: `embed` (texts in, float32 rows as raw bytes out) over gRPC by perf_analyzer at "
        "bulk priority, concurrency 4 to 64, float16 embedder instances on the GPU and "
        "tokenizer instances on the CPU; setups with the `tokens` option also sweep "
        "`embed_tokens` (the same texts as token ids, tokenized by the client). A setup "
        "`bert-base-e4-t8-r256` has 4 embedder instances, 8 tokenizer instances and executions "
        "of up to 256 rows; up to run5 its forwards ran eagerly and `-graphs` replayed each as a "
        "CUDA graph at the kit's token buckets; from run6 graphs ship and `-eager` turns them "
        "off; `-mps` serves under NVIDIA MPS. Tokens count [CLS] "
        "and [SEP], not padding. MFU: model FLOPs (matrix products and attention) per second "
        "over the GPU's dense float16 peak. The anchors are H200 figures; an H100 has the same "
        "dense float16 peak and less memory bandwidth.",
        "",
        "## Runs",
        "",
        *runs_table(runs),
        "",
        "## Beside the anchors",
        "",
        *anchor_table(runs),
        "",
        "## Best throughput, and the best within the latency target",
        "",
        *summary_table(runs),
        "",
        "## Entry points: texts in or token ids in",
        "",
        *entry_point_table(runs),
        "",
        "## Correctness of the served embeddings",
        "",
        *check_table(runs),
        "",
        "## Loading the embedder instances",
        "",
        *loading_table(runs),
        "",
        "## The encoder in process",
        "",
        *in_process_lines(_in_process(runs)),
        "",
        "## Every served sweep",
        *sweep_tables(runs),
        *error_lines(runs),
    ]
    return "\n".join(lines) + "\n"


def load_runs(paths: Sequence[Path]) -> list[Run]:
    return [(path.stem, json.loads(path.read_text())) for path in paths]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="results.json files, one per run")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render(load_runs(args.runs)))
    print(args.output)


if __name__ == "__main__":
    main()
