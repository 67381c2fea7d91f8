"""The soak's samples (harness/process_watch.py) as one series per process
and measure, and the figures its checks bound: growth per 100,000 requests
(Theil–Sen, so a single spike such as a garbage collection's peak does not
tilt it), and how far a series strays after warm-up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.process_watch import Sample

PROCESS_METRICS = ("rss_bytes", "fds", "threads")
TRITON_MEMORY = "triton_memory"
SHM_BYTES = "shm_bytes"
METRICS = (*PROCESS_METRICS, TRITON_MEMORY, SHM_BYTES)
PER_REQUESTS = 100_000
# Past this many points the pairwise slopes are taken among this many evenly
# spaced ones: 2,000 points are 2 million pairs, a fraction of a second.
MAX_POINTS = 2000

Point = tuple[float, int, float]  # at_s, requests, value


@dataclass(frozen=True)
class Series:
    label: str  # a process's label, "triton name{labels}" or "shm"
    metric: str  # one of METRICS
    points: tuple[Point, ...]

    @property
    def in_bytes(self) -> bool:
        """Whether the values are bytes (Triton's memory metrics say so in
        their names)."""
        if self.metric == TRITON_MEMORY:
            return self.label.partition("{")[0].endswith("_bytes")
        return self.metric.endswith("_bytes")


def series_of(samples: Sequence[Sample], metric: str) -> list[Series]:
    """One series per process label (or Triton metric) in the order each first
    appears; a label absent from a sample has no point there."""
    if metric == SHM_BYTES:
        points = tuple(
            (sample.at_s, sample.requests, float(sample.shm_bytes)) for sample in samples
        )
        return [Series("shm", metric, points)] if points else []
    by_label: dict[str, list[Point]] = {}
    for sample in samples:
        if metric == TRITON_MEMORY:
            values = {f"triton {key}": value for key, value in sample.triton_memory.items()}
        elif metric in PROCESS_METRICS:
            values = {
                label: float(getattr(process, metric))
                for label, process in sample.processes.items()
            }
        else:
            raise ValueError(f"unknown metric {metric!r}; one of {METRICS}")
        for label, value in values.items():
            by_label.setdefault(label, []).append((sample.at_s, sample.requests, value))
    return [Series(label, metric, tuple(points)) for label, points in by_label.items()]


def growth_per_100k(series: Series, after_s: float) -> float | None:
    """The Theil–Sen slope of value against requests over the points from
    `after_s` on, per 100,000 requests; None where fewer than 3 points or
    the requests do not advance."""
    points = _after(series, after_s)
    if len(points) < 3:
        return None
    if len(points) > MAX_POINTS:
        chosen = np.unique(np.linspace(0, len(points) - 1, MAX_POINTS).round().astype(int))
        points = [points[index] for index in chosen]
    requests = np.array([point[1] for point in points], dtype=float)
    values = np.array([point[2] for point in points], dtype=float)
    first, second = np.triu_indices(len(points), k=1)
    run = requests[second] - requests[first]
    advanced = run != 0  # samples between which no request was answered
    if not advanced.any():
        return None
    slopes = (values[second] - values[first])[advanced] / run[advanced]
    return float(np.median(slopes)) * PER_REQUESTS


def _after(series: Series, after_s: float) -> list[Point]:
    return [point for point in series.points if point[0] >= after_s]
