"""PNG plots of a soak run's samples (harness/process_watch.py): one line per
process or metric over the minutes of the run, so the report can show each
series beside the slope it flags (matplotlib, Agg backend: no display
needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)

from harness.process_watch import Sample  # noqa: E402
from harness.soak_series import SHM_BYTES, TRITON_MEMORY, Series, series_of  # noqa: E402

MIB = 1 << 20
# Past this many lines the legend goes beside the axes, where it hides none.
LEGEND_INSIDE = 6
# Past the default cycle's ten colors lines would share one; tab20 has twenty.
TEN_COLORS = 10
# Each kind's file name, measure, title and axis label.
KINDS = (
    ("rss", "rss_bytes", "Resident memory per process", "RSS (MiB)"),
    ("fds", "fds", "Open descriptors per process", "descriptors"),
    ("threads", "threads", "Threads per process", "threads"),
    ("triton_memory", TRITON_MEMORY, "Triton's memory metrics", "MiB"),
    ("shm", SHM_BYTES, "Shared-memory folder", "files' memory (MiB)"),
)


def plot_series(
    series: Sequence[Series], title: str, y_label: str, path: Path, panel_each: bool = False
) -> Path:
    """x = minutes since the watch began, one line per series (bytes drawn in
    MiB). `panel_each`: one panel per series, sharing the x axis, for series
    of unlike scales (Triton's used memory beside the machine's total)."""
    if not series or not all(each.points for each in series):
        raise ValueError("each series needs at least one point")
    panels = len(series) if panel_each else 1
    figure, axes = plt.subplots(
        panels,
        figsize=(10, 2 + 2.2 * panels if panel_each else 5),
        sharex=True,
        squeeze=False,
        layout="constrained",
    )
    if len(series) > TEN_COLORS:
        axes[0][0].set_prop_cycle(color=plt.get_cmap("tab20").colors)
    for index, each in enumerate(series):
        axis = axes[index if panel_each else 0][0]
        scale = MIB if each.in_bytes else 1
        axis.plot(
            [point[0] / 60 for point in each.points],
            [point[2] / scale for point in each.points],
            label=each.label,
        )
        axis.set_ylabel(y_label)
        axis.grid(True, alpha=0.3)
        if panel_each:
            axis.set_title(each.label, fontsize="small")
    axes[-1][0].set_xlabel("minutes since start")
    figure.suptitle(title)
    if not panel_each:
        if len(series) > LEGEND_INSIDE:
            figure.legend(loc="outside right upper", fontsize="small")
        else:
            axes[0][0].legend(fontsize="small")
    return _save(figure, path)


def plot_soak(samples: Sequence[Sample], folder: Path) -> dict[str, Path]:
    """One PNG per kind of measure (rss, fds, threads, triton_memory, shm) in
    `folder`, by kind; a kind with no series (no metrics URL) has none."""
    paths = {}
    for kind, metric, title, y_label in KINDS:
        series = series_of(samples, metric)
        if series:
            paths[kind] = plot_series(
                series,
                title,
                y_label,
                folder / f"{kind}.png",
                panel_each=metric == TRITON_MEMORY,
            )
    return paths


def _save(figure: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
