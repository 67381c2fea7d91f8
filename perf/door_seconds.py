"""The door's bound in seconds of work, swept on small nodes: the scale-out
cluster of perf/scale_out.py (3 replicas, each a cgroup of 0.3 CPU on one
vCPU, behind the chart's Envoy) started once per value of the tokenizer's
max_embedder_backlog_seconds, and its throughput with 1, 2 and 3 replicas
measured as tests/test_scale_out.py does (harness/scale_out/scenarios.py):

    .venv/bin/python -m perf.door_seconds [--seconds 0.25 0.5 1 2]
        [--output perf/results/debian12-2core/door_seconds.md]

Needs what perf.scale_out needs; about 3 minutes per value. Run nothing
else meanwhile.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from model_common.processor import this_processor
from tritonclient.grpc import model_config_pb2

from harness.load import percentile_ms
from harness.repository import ConfigEdit, read_config
from harness.scale_out.cluster import missing_parts, running_cluster
from harness.scale_out.scenarios import (
    CPUS_PER_REPLICA,
    QUOTA_HELD_SHARE,
    REPLICAS,
    Throughputs,
    throughput,
)
from perf.report_command import write_report
from server.paths import SHARED_REPOSITORY

PARAMETER = "max_embedder_backlog_seconds"
SHIPPED = float(
    read_config(SHARED_REPOSITORY / "tokenizer" / "config.pbtxt").parameters[PARAMETER].string_value
)
COMMAND = ".venv/bin/python -m perf.door_seconds"


def _door_of(seconds: float) -> ConfigEdit:
    def edit(config: model_config_pb2.ModelConfig) -> None:
        config.parameters[PARAMETER].string_value = repr(seconds)

    return edit


def _edits(seconds: float) -> dict[str, ConfigEdit]:
    """The tokenizer's door at `seconds`; the shipped config as it is."""
    return {} if seconds == SHIPPED else {"tokenizer": _door_of(seconds)}


def sweep(values: list[float], seconds: float) -> dict[float, Throughputs]:
    measured = {}
    for value in values:
        with (
            tempfile.TemporaryDirectory(prefix="door_seconds_") as work,
            running_cluster(Path(work), REPLICAS, CPUS_PER_REPLICA, edits=_edits(value)) as cluster,
        ):
            measured[value] = throughput(cluster, seconds)
    return measured


def render(measured: dict[float, Throughputs], command: str) -> str:
    rows = []
    for value, runs in measured.items():
        for run in runs.runs.values():
            ok = [outcome for outcome in run.outcomes if outcome.ok]
            shipped = " (shipped)" if value == SHIPPED else ""
            rows.append(
                f"| {value:g}{shipped} | {run.replicas} | {run.clients} | {run.texts_per_s:.1f} | "
                f"{run.texts_per_cpu_s:.1f} | {', '.join(f'{q:.2f}' for q in run.quota_used)} | "
                f"{percentile_ms(ok, 50):.0f} / {percentile_ms(ok, 99):.0f} | "
                f"{len(run.outcomes) - len(ok)} |"
            )
    lines = [
        "# The door's seconds of work on small nodes",
        "",
        f"`{command}`",
        "",
        f"Processor: {this_processor().describe()}.",
        "",
        f"The scale-out cluster of `perf.scale_out` ({REPLICAS} replicas, each a cgroup of "
        f"{CPUS_PER_REPLICA:g} CPU on one vCPU, one embedder instance of one thread, behind the "
        "chart's Envoy), started afresh for each value of the tokenizer's "
        f"`{PARAMETER}`; at each, the throughput of `tests/test_scale_out.py` (one replica "
        "probed first, its clients per replica from that capacity; then 1 and 2 replicas side "
        "by side, then 3). Quota used: each replica's CPU time over its quota for the same "
        f"time (the test holds them to {QUOTA_HELD_SHARE:.0%} together). Texts per CPU "
        "second: what the replicas' CPU time served.",
        "",
        "| seconds of work | replicas | clients | texts/s | texts per CPU second "
        "| quota used | latency p50 / p99 ms | failed |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0])
    parser.add_argument("--run-seconds", type=float, default=20.0, help="per throughput run")
    parser.add_argument(
        "--output", type=Path, default=Path("perf/results/debian12-2core/door_seconds.md")
    )
    args = parser.parse_args(arguments)
    missing = missing_parts()
    if missing:
        parser.error(f"needs {', '.join(missing)}")
    if min(args.seconds) <= 0:
        parser.error("--seconds must be positive")
    measured = sweep(args.seconds, args.run_seconds)
    write_report(args.output, render(measured, f"{COMMAND} {shlex.join(arguments)}".strip()))


if __name__ == "__main__":
    main()
