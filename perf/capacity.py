"""Capacity at a latency target: the highest Poisson request rate a
configuration holds with p99 within the target and no failed request.

Rates are swept upward as fractions of the configuration's closed-loop
throughput; a rate counts as held when every request succeeded and p99
stayed within the target. A server that falls behind the arrivals shows it
in p99, as its queue grows over the run. perf_analyzer's own throughput is
not a test of that: in its fixed-count Poisson runs here it reported 77-91%
of the offered rate at every rate, a quarter of capacity included, in
ratios such as 10/11 and 5/6 that fit a run time rounded up to whole seconds
(perf/results/debian12-2core/report.md, 'Every rate measured').
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from perf.perf_analyzer import Measurement, PerfAnalyzerError, run_perf_analyzer

RATE_FRACTIONS = (0.25, 0.5, 0.7, 0.85, 1.0)
SECONDS_PER_RATE = 10.0
MIN_REQUESTS = 40


@dataclass(frozen=True)
class RatePoint:
    offered_per_s: float
    measurement: Measurement | None  # None: perf_analyzer saw failed requests
    error: str = ""

    def holds(self, target_ms: float) -> bool:
        return self.measurement is not None and self.measurement.p99_ms <= target_ms


def rate_sweep(
    model: str,
    url: str,
    protocol: Literal["grpc", "http"],
    input_data: Path,
    csv_prefix: Path,
    texts_per_request: int,
    peak_per_s: float,
) -> list[RatePoint]:
    points = []
    for fraction in RATE_FRACTIONS:
        rate = round(peak_per_s * fraction, 1)
        csv_path = csv_prefix.with_name(f"{csv_prefix.name}_rate{rate:g}.csv")
        try:
            (measurement,) = run_perf_analyzer(
                model,
                url,
                protocol,
                input_data,
                csv_path,
                batch_size=texts_per_request,
                request_rate=(rate, rate, rate),
                poisson=True,
                # Time windows never stabilize under Poisson arrivals at low
                # rates; a fixed request count does.
                request_count=max(MIN_REQUESTS, math.ceil(rate * SECONDS_PER_RATE)),
            )
        except PerfAnalyzerError as error:
            points.append(RatePoint(rate, None, str(error).splitlines()[-1]))
            continue
        points.append(RatePoint(rate, measurement))
    return points


def capacity_at(points: Sequence[RatePoint], target_ms: float) -> float:
    """The highest offered rate held, counting only rates below the first
    rate that failed the target (a later lucky point does not count)."""
    held = 0.0
    for point in sorted(points, key=lambda p: p.offered_per_s):
        if not point.holds(target_ms):
            break
        held = point.offered_per_s
    return held


def capacity_table(
    sweeps: dict[str, list[RatePoint]], targets_ms: Sequence[float], texts_per_request: int
) -> str:
    header = " | ".join(f"p99 <= {target:g} ms" for target in targets_ms)
    lines = [
        f"| configuration | {header} |",
        "|---|" + "---|" * len(targets_ms),
    ]
    for name, points in sweeps.items():
        cells = []
        for target in targets_ms:
            rate = capacity_at(points, target)
            cells.append(
                f"{rate:g} req/s ({rate * texts_per_request:g} texts/s)" if rate else "not held"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def rate_points_table(sweeps: dict[str, list[RatePoint]]) -> str:
    lines = [
        "| configuration | offered req/s | served req/s | p50 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|",
    ]
    for name, points in sweeps.items():
        for point in points:
            m = point.measurement
            if m is None:
                lines.append(f"| {name} | {point.offered_per_s:g} | | | | {point.error} |")
                continue
            lines.append(
                f"| {name} | {point.offered_per_s:g} | {m.requests_per_sec:.1f} | "
                f"{m.p50_ms:.0f} | {m.p99_ms:.0f} | |"
            )
    return "\n".join(lines) + "\n"
