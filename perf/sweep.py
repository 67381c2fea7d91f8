"""perf_analyzer sweeps per workload against a running server: a concurrency
range (closed loop: the load the server can carry), then Poisson arrivals at
fractions of the best request rate that range reached (open loop: latency
at a given offered rate).

Sweeps measure throughput, so the command sends them at Triton's bulk
priority level (2) unless told otherwise (`Target.priority` in code): its
queues wait up to 30 s, where the interactive level sheds a request after
1-2 s in a queue (see the embedder's config.pbtxt), and a closed loop past
capacity would otherwise measure the shedding.

The concurrency sweep is one perf_analyzer run, stabilized over time
windows. A Poisson rate is one run per rate that sends a fixed number of
requests (about `seconds_per_rate` worth) and measures them all: the
arrivals in a short window vary too much for perf_analyzer's stability
check.

Files in the results folder: `<label>_<workload>_concurrency.csv` and
`<label>_<workload>_poisson_<rate>.csv`, each with its composing models'
`<model>_v<version>.<same name>` and perf_analyzer's output (`.log`). The
input-data files go to build/perf_inputs/ (regenerated, never committed).

    python -m perf.sweep --url 127.0.0.1:8001 --results perf/results/NAME
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from harness.priority import BULK
from perf.perf_analyzer import Measurement, Mode, run_perf_analyzer
from perf.workloads import (
    Kind,
    Workload,
    workload,
    write_text_input_data,
    write_token_input_data,
)
from server.paths import REPO_ROOT

INPUT_DIR = REPO_ROOT / "build" / "perf_inputs"
RATE_LEVELS = 4  # Poisson rates at 1/4, 2/4, 3/4 and 4/4 of the best request rate
MIN_REQUESTS_PER_RATE = 30


@dataclass(frozen=True)
class Target:
    """Where and how to send: a model of a running server."""

    url: str
    model: str = "embed"
    protocol: Literal["grpc", "http"] = "grpc"
    tokenized: bool = False  # send ids (embed_tokens contract) instead of texts
    metrics_url: str | None = None
    priority: int | None = None  # Triton's request priority level (gRPC only)
    extra: tuple[str, ...] = ()  # more perf_analyzer arguments


@dataclass(frozen=True)
class Windows:
    """How the concurrency sweep measures each level (see run_perf_analyzer)."""

    measurement_ms: int = 3000
    measurement_requests: int | None = None  # count windows, for slow requests
    stability_percentage: float = 25.0
    max_trials: int = 8


@dataclass(frozen=True)
class SweepResult:
    label: str
    workload: Workload
    mode: Mode
    csv_paths: tuple[Path, ...]
    measurements: list[Measurement]

    @property
    def best(self) -> Measurement:
        return max(self.measurements, key=lambda measurement: measurement.infer_per_sec)


def input_data(target: Target, load: Workload) -> Path:
    INPUT_DIR.mkdir(parents=True, exist_ok=True)
    if target.tokenized:
        return write_token_input_data(load, INPUT_DIR / f"{load.name}-tokens.json")
    return write_text_input_data(load, INPUT_DIR / f"{load.name}-text.json")


def _run(target: Target, load: Workload, csv_path: Path, **how: Any) -> list[Measurement]:
    """run_perf_analyzer on `target` with `load`; `how` says how the load is sent."""
    return run_perf_analyzer(
        target.model,
        target.url,
        target.protocol,
        input_data(target, load),
        csv_path,
        batch_size=load.texts_per_request,
        metrics_url=target.metrics_url,
        priority=target.priority,
        extra=target.extra,
        **how,
    )


def concurrency_sweep(
    target: Target,
    load: Workload,
    results: Path,
    *,
    label: str,
    concurrency: tuple[int, int, int] = (1, 4, 1),
    windows: Windows = Windows(),
) -> SweepResult:
    csv_path = results / f"{label}_{load.name}_concurrency.csv"
    measurements = _run(
        target,
        load,
        csv_path,
        concurrency=concurrency,
        measurement_ms=windows.measurement_ms,
        measurement_requests=windows.measurement_requests,
        stability_percentage=windows.stability_percentage,
        max_trials=windows.max_trials,
    )
    return SweepResult(label, load, "concurrency", (csv_path,), measurements)


def poisson_rates(requests_per_sec: float, levels: int = RATE_LEVELS) -> list[float]:
    """`levels` evenly spaced rates up to `requests_per_sec`, to 3
    significant digits so the file names and CSVs stay readable."""
    if requests_per_sec <= 0:
        raise ValueError(f"no request rate to sweep below {requests_per_sec} requests/s")
    return [float(f"{requests_per_sec * level / levels:.3g}") for level in range(1, levels + 1)]


def request_rate_sweep(
    target: Target,
    load: Workload,
    results: Path,
    *,
    label: str,
    rates: Sequence[float],
    seconds_per_rate: float = 10.0,
    min_requests: int = MIN_REQUESTS_PER_RATE,
) -> SweepResult:
    """Poisson arrivals at each rate (requests/s): max(min_requests, rate x
    seconds_per_rate) requests per rate. (Below 100 requests, p99 is their
    maximum.)"""
    csv_paths = []
    measurements = []
    for rate in rates:
        csv_path = results / f"{label}_{load.name}_poisson_{rate:g}.csv"
        measurements += _run(
            target,
            load,
            csv_path,
            request_rate=(rate, rate, rate),
            poisson=True,
            request_count=max(min_requests, math.ceil(rate * seconds_per_rate)),
        )
        csv_paths.append(csv_path)
    return SweepResult(label, load, "request_rate", tuple(csv_paths), measurements)


def sweep_workloads(
    target: Target,
    loads: Sequence[Workload],
    results: Path,
    *,
    label: str,
    concurrency: tuple[int, int, int] = (1, 4, 1),
    windows: Windows = Windows(),
    seconds_per_rate: float = 10.0,
) -> list[SweepResult]:
    """For each workload, the concurrency sweep, then Poisson rates up to its
    best request rate."""
    swept: list[SweepResult] = []
    for load in loads:
        closed = concurrency_sweep(
            target, load, results, label=label, concurrency=concurrency, windows=windows
        )
        opened = request_rate_sweep(
            target,
            load,
            results,
            label=label,
            rates=poisson_rates(closed.best.requests_per_sec),
            seconds_per_rate=seconds_per_rate,
        )
        swept += [closed, opened]
    return swept


def _range(text: str) -> tuple[int, int, int]:
    start, end, step = (int(part) for part in text.split(":"))
    return start, end, step


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="host:port of the server (gRPC or HTTP)")
    parser.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    parser.add_argument("--model", default="embed")
    parser.add_argument(
        "--tokenized", action="store_true", help="send token ids (for embed_tokens)"
    )
    parser.add_argument("--metrics-url", help="host:port/metrics, to record GPU metrics")
    parser.add_argument(
        "--priority",
        type=int,
        default=BULK,
        help="Triton priority level (gRPC; 0: the model's default)",
    )
    parser.add_argument("--results", type=Path, required=True, help="folder for the CSVs")
    parser.add_argument("--label", default="sweep", help="prefix of the CSV names")
    parser.add_argument("--kinds", nargs="+", choices=["short", "long"], default=["short", "long"])
    parser.add_argument("--texts-per-request", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--concurrency", type=_range, default=(1, 4, 1), help="start:end:step")
    parser.add_argument("--measurement-ms", type=int, default=3000)
    parser.add_argument(
        "--measurement-requests",
        type=int,
        help="count windows of this many requests instead of time windows",
    )
    parser.add_argument("--seconds-per-rate", type=float, default=10.0)
    args = parser.parse_args(argv)
    kinds: list[Kind] = args.kinds
    target = Target(
        url=args.url,
        model=args.model,
        protocol=args.protocol,
        tokenized=args.tokenized,
        metrics_url=args.metrics_url,
        priority=args.priority if args.protocol == "grpc" else None,
    )
    loads = [workload(kind, count) for kind in kinds for count in args.texts_per_request]
    for result in sweep_workloads(
        target,
        loads,
        args.results,
        label=args.label,
        concurrency=args.concurrency,
        windows=Windows(args.measurement_ms, args.measurement_requests),
        seconds_per_rate=args.seconds_per_rate,
    ):
        for measurement in result.measurements:
            print(
                f"{result.workload.name:>9} {result.mode:>12} {measurement.load:>7g}: "
                f"{measurement.sentences_per_sec:8.1f} texts/s "
                f"{measurement.tokens_per_sec(result.workload.mean_tokens):9.0f} tokens/s "
                f"p50 {measurement.p50_ms:8.1f} ms  p99 {measurement.p99_ms:8.1f} ms"
            )


if __name__ == "__main__":
    main()
