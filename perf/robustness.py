"""The robustness table: runs the scenarios of harness/robustness.py
(overload, priority, a killed stub process, fuzzed requests and shutdown)
against real servers and writes their results, then the shedding table:
overload at 3x and 6x each priority level's closed-loop peak, on the shipped
models and, side by side in the same run, on the same models without the
admission at the tokenizer (the configuration before it), then fairness
between tenants at the edge (perf/tenants.py):

    .venv/bin/python -m perf.robustness --output perf/results/<machine>/robustness.md
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from harness.load import Outcome, percentile_ms
from harness.priority import BULK, INTERACTIVE
from harness.repository import repository_variant
from harness.robustness import (
    BULK_CLIENTS,
    DEADLINE_S,
    LEVEL_DEADLINE_S,
    TEXTS_PER_REQUEST,
    OverloadResult,
    SheddingResult,
    fuzz,
    kill_stub,
    measure_capacity,
    overload,
    priority,
    shedding,
    shutdown,
)
from harness.server import running_server
from perf.report_command import write_report
from perf.tenants import tenants_report
from server.paths import default_repositories


def _latency_cell(outcomes: Sequence[Outcome]) -> str:
    if not outcomes:
        return "none"
    return f"p50 {percentile_ms(outcomes, 50):.0f} ms, p99 {percentile_ms(outcomes, 99):.0f} ms"


def _overload_row(result: OverloadResult, seconds: float) -> str:
    unavailable = [o for o in result.rejections if o.status == "StatusCode.UNAVAILABLE"]
    return (
        f"| overload {result.multiple:g}x | open loop, {result.rate_per_s:.1f} req/s for "
        f"{seconds:.0f} s, deadline {DEADLINE_S:.0f} s | sent {len(result.outcomes)}, "
        f"answered {len(result.outcomes)}: {dict(result.statuses)}; goodput "
        f"{len(result.successes) / seconds:.1f} req/s; successes {_latency_cell(result.successes)}; "
        f"rejections {_latency_cell(unavailable)}; tokenized but not answered OK "
        f"{result.tokenized - len(result.successes)} of {result.tokenized}; "
        f"ready after: {result.ready_after} |"
    )


def report(workdir: Path, seconds: float) -> list[str]:
    with running_server(workdir / "server.log") as server:
        capacity = measure_capacity(server)
        loads = [overload(server, capacity, multiple, seconds) for multiple in (2, 4)]
        ranked = priority(server, seconds)
        fault = kill_stub(server, capacity)
        fuzzed = fuzz(server)
    stopped = shutdown(workdir / "shutdown.log")
    bulk_ok = sum(outcome.ok for outcome in ranked.bulk)
    fault_failures = Counter(o.status for o in fault.outcomes if not o.ok)
    sent = (
        sum(len(result.outcomes) for result in loads)
        + len(ranked.interactive)
        + len(ranked.bulk_labelled_trickle)
        + len(fault.outcomes)
        + stopped.in_flight
    )
    lost = stopped.in_flight - stopped.answered_ok
    return [
        f"Requests of {TEXTS_PER_REQUEST} short texts unless said otherwise; the load "
        "generator shares the 2 cores with the server.",
        "",
        "| scenario | what was done | result |",
        "|---|---|---|",
        f"| capacity | closed loop, 8 clients | {capacity:.1f} req/s "
        f"({capacity * TEXTS_PER_REQUEST:.0f} texts/s) |",
        *(_overload_row(result, seconds) for result in loads),
        f"| priority | {BULK_CLIENTS} bulk clients (priority 2) saturating, plus two trickles of 1-text "
        f"requests at 2/s, one interactive (priority 1), one labelled bulk | interactive "
        f"{_latency_cell(ranked.interactive)}; the same trickle as bulk "
        f"{_latency_cell(ranked.bulk_labelled_trickle)}; bulk {bulk_ok / ranked.seconds:.1f} "
        "req/s |",
        f"| stub kill | SIGKILL to 1 of {len(fault.stubs_before)} embedder stubs under load at half "
        f"capacity | sent {len(fault.outcomes)}, answered {len(fault.outcomes)}, failed "
        f"{dict(fault_failures)}; recovered (watchdog reload) {fault.recovery_s:.1f} s after "
        f"the kill; stubs after: {len(fault.stubs_after)} |",
        f"| fuzz | {fuzzed.iterations} random bodies, shapes, datatypes, parameters | answers "
        f"{dict(fuzzed.answers)}; unanswered {fuzzed.transport_failures}; ready after: "
        f"{fuzzed.ready_after} |",
        f"| shutdown | SIGTERM with {stopped.in_flight} requests in flight | "
        f"{stopped.answered_ok} answered OK, {stopped.answered_after_signal} of them after the "
        f"signal; exit code {stopped.exit_code} after "
        f"{stopped.exit_s:.1f} s |",
        f"| requests lost | all scenarios ({sent} load requests) | {lost} |",
    ]


SHEDDING_MULTIPLES = (3.0, 6.0)
LEVEL_NAMES = {INTERACTIVE: "interactive", BULK: "bulk"}


def _without_the_door(config: model_config_pb2.ModelConfig) -> None:
    """The tokenizer as it was before admission: it never holds work, and its
    interactive queue is long (128 requests, 1 s)."""
    config.parameters["max_embedder_backlog"].string_value = str(10**9)
    config.parameters["max_embedder_backlog_seconds"].string_value = str(10**9)
    interactive = config.dynamic_batching.priority_queue_policy[INTERACTIVE]
    interactive.max_queue_size = 128
    interactive.default_timeout_microseconds = 1_000_000


def _shedding_rows(setup: str, result: SheddingResult) -> list[str]:
    rows = []
    for run in result.runs:
        goodput = run.ok / result.seconds
        rows.append(
            f"| {setup} | {LEVEL_NAMES[result.level]} | {result.peak_per_s:.1f} "
            f"(c={result.peak_concurrency}) | {run.multiple:g}x: {run.rate_per_s:.1f} | "
            f"{len(run.outcomes)} | {run.ok} | {goodput:.1f} ({goodput / result.peak_per_s:.0%}) | "
            f"{_latency_cell(run.refused)} ({len(run.refused)}) | "
            f"{run.tokenized - run.ok} of {run.tokenized} ({run.wasted_share:.1%}) |"
        )
    return rows


def shedding_report(workdir: Path, seconds: float) -> list[str]:
    setups: dict[str, Sequence[Path]] = {
        "shipped: admission at the tokenizer": default_repositories(),
        "before: no admission": [
            repository_variant(workdir / "no_door", {"tokenizer": _without_the_door})
        ],
    }
    rows = []
    for index, (name, repositories) in enumerate(setups.items()):
        with running_server(workdir / f"shedding_{index}.log", repositories) as server:
            for level in (INTERACTIVE, BULK):
                result = shedding(server, level, SHEDDING_MULTIPLES, seconds)
                rows.extend(_shedding_rows(name, result))
    return [
        "",
        "## Shedding at the door",
        "",
        f"Requests of {TEXTS_PER_REQUEST} short texts. Peak: the best closed-loop throughput "
        "(req/s) of 4, 8 and 16 clients at that priority level; then open-loop arrivals at 3x "
        f"and 6x that peak for {seconds:.0f} s. Client deadlines: interactive "
        f"{LEVEL_DEADLINE_S[INTERACTIVE]:.0f} s, bulk {LEVEL_DEADLINE_S[BULK]:.0f} s. Goodput: "
        "requests answered OK per second, and its share of the peak. Waste: requests the "
        "tokenizer tokenized that were not answered OK (its answered count in Triton's "
        "statistics against the OK answers).",
        "",
        "| setup | level | peak req/s | offered req/s | sent | OK | goodput req/s (of peak) "
        "| refused latency (count) | tokenized, not answered OK |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per overload level")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument(
        "--shedding-only", action="store_true", help="only the shedding table, printed"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="robustness_") as workdir:
        if args.shedding_only:
            print("\n".join(shedding_report(Path(workdir), args.seconds)))
            return
        lines = [
            *report(Path(workdir), args.seconds),
            *shedding_report(Path(workdir), args.seconds),
            "",
            tenants_report(Path(workdir), args.seconds),
        ]
    table = "\n".join(lines)
    write_report(args.output, table + "\n")


if __name__ == "__main__":
    main()
