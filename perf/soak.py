"""The soak: weeks of traffic's failure modes in half an hour. Every task
(MiniLM's embeddings, a reranker, a sparse encoder; random weights for the
last two) over every route (gRPC and HTTP to Triton, the gateway's HTTP
APIs, gRPC and HTTP through the edge), good and bad requests, cancelled and
dropped ones, queue deadlines, traces, bursts over a quota, model reloads
and stub kills, mixed as harness/soak_mix.py declares; every answer checked
against the same request's answer before the load; every process sampled.

    .venv/bin/python -m perf.soak [--minutes 30] [--results perf/results/debian12-2core]

Writes soak.md and the plots soak/*.png into the results folder, and exits
non-zero where a check failed. The suite runs the same for 2 minutes
(tests/test_soak.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

from model_common.processor import this_processor

from harness import cross_encoder_models, sparse_encoder_models
from harness.soak_checks import Check, Growth, checks, growths, kill_steps
from harness.soak_mix import (
    RSS_GROWTH_PER_100K,
    RSS_SHORT_ALLOWANCE,
    SLOPE_MIN_REQUESTS,
    WEIGHTS,
    WORKERS,
)
from harness.soak_run import SoakResult, soak
from harness.soak_series import series_of
from harness.soak_stack import soak_stack
from perf.report_command import write_report
from perf.soak_plots import plot_soak

MIB = 2**20
RERANKER = "bert"
SPARSE_ENCODER = "bert_max"


def _classes(result: SoakResult) -> list[str]:
    kinds = Counter(outcome.kind for outcome in result.outcomes)
    verdicts = Counter((outcome.kind, outcome.verdict) for outcome in result.outcomes)
    names = sorted({verdict for _, verdict in verdicts})
    lines = [
        "| class | requests | " + " | ".join(names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    for kind in [*WEIGHTS, "burst"]:
        counts = " | ".join(str(verdicts[kind, name]) for name in names)
        lines.append(f"| {kind} | {kinds[kind]} | {counts} |")
    return lines


def _routes(result: SoakResult) -> list[str]:
    routes = Counter((outcome.route, outcome.model or "-") for outcome in result.outcomes)
    lines = ["| route | model | requests |", "|---|---|---:|"]
    lines += [
        f"| {route} | {model} | {count} |" for (route, model), count in sorted(routes.items())
    ]
    return lines


def _events(result: SoakResult) -> list[str]:
    lines = ["| at (s) | event | stage | back after (s) | detail |", "|---:|---|---|---:|---|"]
    for event in sorted(result.events, key=lambda each: each.at_s):
        back = "never" if event.done_s is None else f"{event.done_s - event.at_s:.1f}"
        lines.append(
            f"| {event.at_s:.0f} | {event.kind} | {event.target} | {back} | {event.detail} |"
        )
    return lines


def _cell(growth: Growth) -> str:
    flag = "" if growth.held else " **over**"
    if growth.metric == "rss_bytes":
        slope = "n/a" if growth.per_100k is None else f"{growth.per_100k / MIB:+.1f} MiB"
        return f"{slope} ({growth.judged_by}){flag}"
    return f"{growth.rise:+.0f}{flag}"


def _growth(held: list[Growth]) -> list[str]:
    by_label: dict[str, dict[str, Growth]] = {}
    for growth in held:
        if growth.metric != "shm_bytes":  # not a process's: in the levels' table
            by_label.setdefault(growth.label, {})[growth.metric] = growth
    lines = [
        "| process | RSS growth per 100,000 requests | descriptors, end against warm-up | "
        "threads, end against warm-up | requests after its warm-up |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, metrics in sorted(by_label.items()):
        cells = [
            _cell(metrics[metric]) if metric in metrics else "-"
            for metric in ("rss_bytes", "fds", "threads")
        ]
        requests = max(growth.requests for growth in metrics.values())
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {requests} |")
    return lines


def _kill_steps(result: SoakResult) -> str:
    """What each death left in tritonserver, which the flat checks count apart."""
    threads = kill_steps(result, "tritonserver", "threads")
    rss = kill_steps(result, "tritonserver", "rss_bytes")
    return (
        "Each kill's step in tritonserver after its repair (the old instance Triton 2.51 "
        'keeps where the stub died with requests in flight; docs/operations.md, "Staying '
        f'up"): threads {", ".join(f"{step:+.0f}" for step in threads) or "none"}; RSS '
        + (", ".join(f"{step / MIB:+.1f} MiB" for step in rss) or "none")
        + "."
    )


def _levels(result: SoakResult) -> list[str]:
    """Triton's memory metrics and the shared-memory folder, first and last
    sample after warm-up."""
    lines = ["| series | after warm-up | at the end |", "|---|---:|---:|"]
    for metric in ("triton_memory", "shm_bytes"):
        for series in series_of(result.samples, metric):
            window = [point for point in series.points if point[0] >= result.warmup_s]
            if window:
                first, last = window[0][2], window[-1][2]
                lines.append(f"| {series.label} | {first / MIB:.1f} MiB | {last / MIB:.1f} MiB |")
    return lines


def _checks(found: list[Check]) -> list[str]:
    lines = ["| check | held | detail |", "|---|---|---|"]
    lines += [
        f"| {check.name} | {'yes' if check.passed else '**no**'} | {check.detail} |"
        for check in found
    ]
    return lines


def render(result: SoakResult, plots: dict[str, Path], results: Path) -> str:
    processor = this_processor()
    total = len(result.outcomes)
    answered = [
        o for o in result.outcomes if o.kind in ("good", "traced", "bad", "deadline", "burst")
    ]
    return "\n".join(
        [
            "# Soak",
            "",
            f"`.venv/bin/python -m perf.soak --minutes {result.seconds / 60:g}` on a "
            f"{processor.cpus}-CPU {processor.name} (class {processor.cls}): "
            f"{result.seconds / 60:g} minutes, "
            f"{total} requests from {WORKERS} closed-loop senders ({total / result.seconds:.0f} a "
            f"second) and the bursts; {len(answered)} answers compared with the same request's "
            "answer before the load. The reranker and the sparse encoder have random weights "
            "(harness/cross_encoder_models.py, harness/sparse_encoder_models.py).",
            "",
            "## Checks",
            "",
            *_checks(checks(result)),
            "",
            "## Requests by class and verdict",
            "",
            "right: the answer its reference predicts (a bad request's error); failed: an "
            "error other than the reference's, allowed only while a killed stub's model is "
            "repaired; cancelled, dropped: the client gave up, as meant; expired: refused for "
            "its queue deadline; refused: a burst's request over the quota.",
            "",
            *_classes(result),
            "",
            *_routes(result),
            "",
            "## Reloads and kills",
            "",
            *_events(result),
            "",
            "## Growth after warm-up",
            "",
            f"Warm-up: the first {result.warmup_s:.0f} s, and as long from a replaced stub's "
            "first sample. RSS: the Theil-Sen slope against requests answered, at most "
            f"{RSS_GROWTH_PER_100K / MIB:.0f} MiB per 100,000 requests where the window holds "
            f"{SLOPE_MIN_REQUESTS} requests or more (slope); over fewer (short run), the rise "
            f"it gives at most that bound scaled, plus {RSS_SHORT_ALLOWANCE / MIB:.0f} MiB "
            "(harness/soak_mix.py says why). Descriptors and threads: the median of the last "
            "samples against that of the first after warm-up.",
            "",
            *_growth(growths(result)),
            "",
            _kill_steps(result),
            "",
            *_levels(result),
            "",
            "## Plots",
            "",
            *(f"![{kind}]({path.relative_to(results)})" for kind, path in sorted(plots.items())),
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--results", type=Path, default=Path("perf/results/debian12-2core"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="soak-") as scratch:
        workdir = Path(scratch)
        reranker = cross_encoder_models.build_in_export_environment(workdir / "models", [RERANKER])
        encoder = sparse_encoder_models.build_in_export_environment(
            workdir / "models", [SPARSE_ENCODER]
        )
        with soak_stack(workdir, reranker[RERANKER], encoder[SPARSE_ENCODER]) as stack:
            result = soak(stack, args.minutes * 60, args.seed)
    plots = plot_soak(result.samples, args.results / "soak")
    write_report(args.results / "soak.md", render(result, plots, args.results))
    sys.exit(0 if all(check.passed for check in checks(result)) else 1)


if __name__ == "__main__":
    main()
