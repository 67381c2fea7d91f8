"""PNG plots of perf_analyzer measurements (matplotlib, Agg backend: no
display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)

from perf.perf_analyzer import Measurement, StageTimes  # noqa: E402

STAGES = (
    ("queue_us", "queue", "#b0b0b0"),
    ("compute_input_us", "compute input", "#f2b134"),
    ("compute_infer_us", "compute infer", "#2f6db5"),
    ("compute_output_us", "compute output", "#4caf50"),
)
# Past this ratio between the largest and smallest latency, a linear axis
# squeezes the fast configurations into its first pixels.
LOG_AXIS_RATIO = 20


class LatencyPoint(Protocol):
    @property
    def p99_ms(self) -> float: ...

    @property
    def sentences_per_sec(self) -> float: ...


def plot_throughput_vs_p99(
    series: Mapping[str, Sequence[LatencyPoint]], title: str, path: Path
) -> Path:
    """One line per configuration through its load levels, in the order
    given: x = p99 latency (ms), y = texts/s."""
    if not series or not all(series.values()):
        raise ValueError("each configuration needs at least one measurement")
    figure, axes = plt.subplots(figsize=(8, 5), layout="constrained")
    for label, points in series.items():
        axes.plot(
            [point.p99_ms for point in points],
            [point.sentences_per_sec for point in points],
            marker="o",
            label=label,
        )
    latencies = [point.p99_ms for points in series.values() for point in points]
    if min(latencies) > 0 and max(latencies) / min(latencies) > LOG_AXIS_RATIO:
        axes.set_xscale("log")
    axes.set_xlabel("p99 latency (ms)")
    axes.set_ylabel("throughput (texts/s)")
    axes.set_ylim(bottom=0)
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    return _save(figure, path)


def _bars(label: str, measurement: Measurement) -> list[tuple[str, str, StageTimes]]:
    """(configuration, bar label, times): one bar per composing model of an
    ensemble, else one for the model itself."""
    if measurement.composing:
        return [(label, f"{label} · {step.model}", step.stages) for step in measurement.composing]
    return [(label, label, measurement.server)]


def plot_stage_breakdown(measurements: Mapping[str, Measurement], title: str, path: Path) -> Path:
    """Stacked horizontal bars of server time per request (ms): queue,
    compute input, compute infer and compute output, per composing model of
    each configuration's measurement, with the total written at the end."""
    bars = [bar for label, measurement in measurements.items() for bar in _bars(label, measurement)]
    if not bars:
        raise ValueError("no measurements to plot")
    figure, axes = plt.subplots(figsize=(9, 1.6 + 0.45 * len(bars)), layout="constrained")
    positions = list(range(len(bars)))
    left = [0.0] * len(bars)
    for attribute, name, color in STAGES:
        widths = [getattr(stages, attribute) / 1000 for _, _, stages in bars]
        axes.barh(positions, widths, left=left, color=color, label=name)
        left = [start + width for start, width in zip(left, widths, strict=True)]
    for position, total in zip(positions, left, strict=True):
        axes.annotate(
            f"{total:.3g} ms",
            (total, position),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    # A line between configurations groups each one's steps.
    for position in positions[1:]:
        if bars[position][0] != bars[position - 1][0]:
            axes.axhline(position - 0.5, color="black", linewidth=0.6)
    axes.set_yticks(positions, [bar_label for _, bar_label, _ in bars])
    axes.invert_yaxis()  # first configuration on top
    axes.set_xlim(right=max(left) * 1.15)
    axes.set_xlabel("server time per request (ms)")
    axes.set_title(title)
    axes.grid(True, axis="x", alpha=0.3)
    figure.legend(loc="outside lower center", ncols=len(STAGES), frameon=False)
    return _save(figure, path)


def _save(figure: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
