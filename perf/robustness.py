"""The robustness table: runs the scenarios of harness/robustness.py
(overload, priority, a killed stub process, fuzzed requests and shutdown)
against real servers and writes their results:

    .venv/bin/python -m perf.robustness [--output perf/results/debian12-2core/robustness.md]
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from harness.load import Outcome, percentile_ms
from harness.robustness import (
    BULK_CLIENTS,
    DEADLINE_S,
    TEXTS_PER_REQUEST,
    OverloadResult,
    fuzz,
    kill_stub,
    measure_capacity,
    overload,
    priority,
    shutdown,
)
from harness.server import running_server


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
        f"rejections {_latency_cell(unavailable)}; ready after: {result.ready_after} |"
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
        f"| stub kill | SIGKILL to 1 of {fault.stubs_before} embedder stubs under load at half "
        f"capacity | sent {len(fault.outcomes)}, answered {len(fault.outcomes)}, failed "
        f"{dict(fault_failures)}; recovered (watchdog reload) {fault.recovery_s:.1f} s after "
        f"the kill; stubs after: {fault.stubs_after} |",
        f"| fuzz | {fuzzed.iterations} random bodies, shapes, datatypes, parameters | answers "
        f"{dict(fuzzed.answers)}; unanswered {fuzzed.transport_failures}; ready after: "
        f"{fuzzed.ready_after} |",
        f"| shutdown | SIGTERM with {stopped.in_flight} requests in flight | "
        f"{stopped.answered_ok} answered OK, {stopped.answered_after_signal} of them after the "
        f"signal; exit code {stopped.exit_code} after "
        f"{stopped.exit_s:.1f} s |",
        f"| requests lost | all scenarios ({sent} load requests) | {lost} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per overload level")
    parser.add_argument(
        "--output", type=Path, default=Path("perf/results/debian12-2core/robustness.md")
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="robustness_") as workdir:
        lines = report(Path(workdir), args.seconds)
    table = "\n".join(lines)
    print(table)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(table + "\n")


if __name__ == "__main__":
    main()
