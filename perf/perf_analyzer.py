"""Run Triton's perf_analyzer and read its CSV reports.

`run_perf_analyzer` writes `-f` reports with `--verbose-csv`. For an
ensemble, perf_analyzer also writes one CSV per composing model named
`<model>_v<version>.<csv name>`; it prefixes that to the whole `-f` value,
so it runs inside the CSV's folder with a bare file name, and those files
land beside the main one. Everything it printed goes to `<csv>.log`.
`--collect-metrics` (with a metrics URL) adds only GPU columns (utilization,
power, memory), empty without a GPU.

Units as perf_analyzer reports them: latencies and stage times in
microseconds in the CSV, here p50..p99 in ms and stage times in µs.
`infer_per_sec` counts rows: with `-b B` each request adds B inferences,
so it is already texts/s for the workloads of perf/workloads.py.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from server.paths import REPO_ROOT

LAUNCHER = REPO_ROOT / "build" / "perf_analyzer" / "perf_analyzer"
INSTALL_SCRIPT = "scripts/install_perf_analyzer.sh"

Mode = Literal["concurrency", "request_rate"]
LOAD_COLUMN: dict[Mode, str] = {"concurrency": "Concurrency", "request_rate": "Request Rate"}
GPU_COLUMNS = (
    "Avg GPU Utilization",
    "Avg GPU Power Usage",
    "Max GPU Memory Usage",
    "Total GPU Memory",
)


class PerfAnalyzerError(RuntimeError):
    pass


@dataclass(frozen=True)
class StageTimes:
    """Server-side time per request in one model, µs (Triton's statistics)."""

    queue_us: float
    compute_input_us: float
    compute_infer_us: float
    compute_output_us: float

    @property
    def total_us(self) -> float:
        return (
            self.queue_us + self.compute_input_us + self.compute_infer_us + self.compute_output_us
        )


@dataclass(frozen=True)
class ComposingModel:
    """One step of an ensemble, at the same load level."""

    model: str
    version: str
    infer_per_sec: float
    overhead_us: float  # server time not in queue or compute
    stages: StageTimes


@dataclass(frozen=True)
class Measurement:
    mode: Mode
    load: float  # concurrency, or requests/s offered
    batch_size: int  # rows per request (-b)
    infer_per_sec: float  # rows/s
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    avg_ms: float | None  # absent when perf_analyzer stabilized on a percentile
    client_send_us: float
    client_recv_us: float
    network_us: float  # client wait not accounted for by the server
    # The model asked for. An ensemble's compute times are its steps' summed;
    # its queue is its own (near 0): the steps' queues are in `composing`.
    server: StageTimes
    composing: tuple[ComposingModel, ...] = ()
    gpu_metrics: dict[str, dict[str, float]] = field(default_factory=dict)  # column -> GPU -> value

    @property
    def requests_per_sec(self) -> float:
        return self.infer_per_sec / self.batch_size

    @property
    def sentences_per_sec(self) -> float:
        return self.infer_per_sec

    def tokens_per_sec(self, mean_tokens: float) -> float:
        return self.infer_per_sec * mean_tokens


def perf_analyzer_command() -> list[str]:
    """The command that starts perf_analyzer: the launcher the install
    script writes, or a perf_analyzer on PATH (the NGC SDK image)."""
    if LAUNCHER.is_file():
        return [str(LAUNCHER)]
    found = shutil.which("perf_analyzer")
    if found:
        return [found]
    raise PerfAnalyzerError(f"perf_analyzer is not installed: run {INSTALL_SCRIPT}")


def _levels(start: float, end: float, step: float) -> list[float]:
    """The levels perf_analyzer visits for start:end:step: the same numbers
    as _range_argument writes them, the same arithmetic."""
    start, end, step = (float(f"{value:g}") for value in (start, end, step))
    if step <= 0 or end < start or start <= 0:
        raise ValueError(f"bad range {start}:{end}:{step}: need 0 < start <= end and step > 0")
    levels = []
    level = start
    while level <= end:
        levels.append(level)
        level += step
    return levels


def _range_argument(start: float, end: float, step: float) -> str:
    return f"{start:g}:{end:g}:{step:g}"


def _window_arguments(
    request_count: int | None,
    measurement_requests: int | None,
    measurement_ms: int,
    stability_percentage: float,
    max_trials: int,
) -> list[str]:
    """How perf_analyzer measures each level: all of `request_count`
    requests at once, or windows (of a request count or a time) until they
    are stable."""
    if request_count is not None:
        return [f"--request-count={request_count}"]
    windows = (
        [
            "--measurement-mode=count_windows",
            f"--measurement-request-count={measurement_requests}",
        ]
        if measurement_requests is not None
        else [f"--measurement-interval={measurement_ms}"]
    )
    return [
        *windows,
        f"--stability-percentage={stability_percentage:g}",
        f"--max-trials={max_trials}",
    ]


def _default_timeout_s(
    levels: Sequence[float],
    request_count: int | None,
    measurement_requests: int | None,
    measurement_ms: int,
    max_trials: int,
) -> float:
    if request_count is not None:
        return 60 + 3 * request_count / levels[0]
    # Each level takes at most max_trials windows, plus warm-up and the
    # slowest request of a window; a count window is given a minute.
    window_s = measurement_ms / 1000 if measurement_requests is None else 60.0
    return 30 + len(levels) * (max_trials + 2) * window_s * 1.5


def run_perf_analyzer(
    model: str,
    url: str,
    protocol: Literal["grpc", "http"],
    input_data: Path,
    csv_path: Path,
    *,
    batch_size: int = 1,
    concurrency: tuple[int, int, int] | None = None,
    request_rate: tuple[float, float, float] | None = None,
    poisson: bool = False,
    measurement_ms: int = 3000,
    measurement_requests: int | None = None,
    request_count: int | None = None,
    stability_percentage: float = 25.0,
    max_trials: int = 8,
    metrics_url: str | None = None,
    priority: int | None = None,
    extra: Sequence[str] = (),
    timeout_s: float | None = None,
) -> list[Measurement]:
    """Measures every level of one concurrency or request-rate range (start,
    end, step), asynchronous requests of `batch_size` rows from `input_data`,
    and returns them by increasing load. Each measurement window lasts
    `measurement_ms`, or with `measurement_requests` as long as that many
    requests take to complete (for slow requests). `request_count` (one
    request rate only, a perf_analyzer limit) instead sends exactly that
    many requests and measures them all at once, without windows: the way
    to measure Poisson arrivals, whose counts per window vary too much to
    stabilize. A level that fails (request errors, no stable measurement
    within `max_trials` windows) raises PerfAnalyzerError with
    perf_analyzer's message. `metrics_url` adds the server's GPU metrics;
    `priority` is Triton's request priority level (gRPC only: perf_analyzer
    sends request parameters over gRPC alone); `extra` goes to perf_analyzer
    as it is (for example `--request-parameter dtype:int8:string`)."""
    if (concurrency is None) == (request_rate is None):
        raise ValueError("give exactly one of concurrency and request_rate")
    if priority is not None and protocol != "grpc":
        raise ValueError("perf_analyzer sends a priority over gRPC only")
    if poisson and request_rate is None:
        raise ValueError("poisson applies to a request_rate range only")
    mode: Mode = "concurrency" if concurrency is not None else "request_rate"
    load_range = concurrency if concurrency is not None else request_rate
    assert load_range is not None
    levels = _levels(*load_range)
    if request_count is not None and (mode != "request_rate" or len(levels) != 1):
        raise ValueError("request_count needs a request_rate range of one rate")
    load_arguments = (
        ["--concurrency-range", _range_argument(*load_range)]
        if mode == "concurrency"
        else ["--request-rate-range", _range_argument(*load_range)]
        + ["--request-distribution", "poisson" if poisson else "constant"]
    )
    window_arguments = _window_arguments(
        request_count, measurement_requests, measurement_ms, stability_percentage, max_trials
    )
    metrics_arguments = ["--collect-metrics", f"--metrics-url={metrics_url}"] if metrics_url else []
    # Triton reads the `priority` request parameter as the request's priority level.
    priority_arguments = (
        [] if priority is None else ["--request-parameter", f"priority:{priority}:int"]
    )

    folder = csv_path.parent.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    for stale in [folder / csv_path.name, *_composing_csvs(folder, csv_path.name)]:
        stale.unlink(missing_ok=True)
    command = [
        *perf_analyzer_command(),
        *("-m", model, "-u", url, "-i", protocol, "-b", str(batch_size)),
        f"--input-data={input_data.resolve()}",
        "--async",
        *load_arguments,
        *window_arguments,
        "--verbose-csv",
        *("-f", csv_path.name),
        *metrics_arguments,
        *priority_arguments,
        *extra,
    ]
    if timeout_s is None:
        timeout_s = _default_timeout_s(
            levels, request_count, measurement_requests, measurement_ms, max_trials
        )
    stderr = _execute(command, folder / csv_path.name, timeout_s)
    measurements = parse_csv(folder / csv_path.name, mode, batch_size)
    if len(measurements) != len(levels):
        raise PerfAnalyzerError(
            f"perf_analyzer measured {len(measurements)} of {len(levels)} levels: {stderr}"
        )
    return measurements


def _execute(command: list[str], csv_path: Path, timeout_s: float) -> str:
    """Runs perf_analyzer in the CSV's folder, keeps what it printed in `<csv>.log`, and
    raises PerfAnalyzerError when it fails; the tail of its stderr, for messages."""
    log_path = csv_path.with_suffix(".log")
    try:
        completed = subprocess.run(
            command, cwd=csv_path.parent, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as expired:
        raise PerfAnalyzerError(
            f"perf_analyzer ran past {timeout_s:.0f} s: {' '.join(command)}"
        ) from expired
    log_path.write_text(
        f"$ {' '.join(command)}\n{completed.stdout}\n--- stderr ---\n{completed.stderr}"
    )
    stderr = f"({log_path}) {completed.stderr.strip()[-2000:]}"
    if completed.returncode != 0:
        raise PerfAnalyzerError(f"perf_analyzer exited with {completed.returncode} {stderr}")
    return stderr


@dataclass(frozen=True)
class ClientMeasurement:
    """One concurrency level against a server that is not Triton: what the client saw."""

    concurrency: int
    texts_per_request: int
    requests_per_sec: float
    p50_ms: float
    p99_ms: float

    @property
    def sentences_per_sec(self) -> float:
        return self.requests_per_sec * self.texts_per_request


def run_openai_perf_analyzer(
    url: str,
    endpoint: str,
    input_data: Path,
    csv_path: Path,
    *,
    texts_per_request: int,
    concurrency: tuple[int, int, int],
    measurement_ms: int = 3000,
    stability_percentage: float = 25.0,
    max_trials: int = 8,
) -> list[ClientMeasurement]:
    """Measures an OpenAI-compatible embeddings `endpoint` (a path such as
    "v1/embeddings") at `url` (host:port) over a concurrency range, with whole
    request bodies from `input_data` (perf_analyzer's `payload` entries, each of
    `texts_per_request` texts); by increasing concurrency."""
    levels = _levels(*concurrency)
    folder = csv_path.parent.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / csv_path.name).unlink(missing_ok=True)
    command = [
        *perf_analyzer_command(),
        *("--service-kind=openai", f"--endpoint={endpoint}", "-m", "embeddings", "-u", url),
        f"--input-data={input_data.resolve()}",
        "--async",  # the only mode perf_analyzer has for this service kind
        *("--concurrency-range", _range_argument(*concurrency)),
        f"--measurement-interval={measurement_ms}",
        f"--stability-percentage={stability_percentage:g}",
        f"--max-trials={max_trials}",
        *("-f", csv_path.name),
    ]
    timeout_s = 30 + len(levels) * (max_trials + 2) * measurement_ms / 1000 * 1.5
    stderr = _execute(command, folder / csv_path.name, timeout_s)
    rows = _read_rows(folder / csv_path.name, "concurrency")
    if len(rows) != len(levels):
        raise PerfAnalyzerError(
            f"perf_analyzer measured {len(rows)} of {len(levels)} levels: {stderr}"
        )
    source = folder / csv_path.name
    return sorted(
        (
            ClientMeasurement(
                concurrency=int(_float(row, "Concurrency", source)),
                texts_per_request=texts_per_request,
                requests_per_sec=_float(row, "Inferences/Second", source),
                p50_ms=_float(row, "p50 latency", source) / 1000,
                p99_ms=_float(row, "p99 latency", source) / 1000,
            )
            for row in rows
        ),
        key=lambda measurement: measurement.concurrency,
    )


def _composing_csvs(folder: Path, csv_name: str) -> list[Path]:
    return sorted(folder.glob(f"*_v*.{csv_name}"))


def _float(row: dict[str, str], column: str, source: Path) -> float:
    value = row.get(column)
    if value is None or value == "":
        raise PerfAnalyzerError(f"{source}: no value in column {column!r}")
    return float(value)


def _gpu_metrics(row: dict[str, str]) -> dict[str, dict[str, float]]:
    """`uuid:value;uuid:value;` per GPU column; empty without GPUs."""
    metrics = {}
    for column in GPU_COLUMNS:
        pairs = [item.rsplit(":", 1) for item in row.get(column, "").split(";") if item]
        if pairs:
            metrics[column] = {gpu: float(value) for gpu, value in pairs}
    return metrics


def _stages(row: dict[str, str], source: Path) -> StageTimes:
    return StageTimes(
        queue_us=_float(row, "Server Queue", source),
        compute_input_us=_float(row, "Server Compute Input", source),
        compute_infer_us=_float(row, "Server Compute Infer", source),
        compute_output_us=_float(row, "Server Compute Output", source),
    )


def _read_rows(path: Path, mode: Mode) -> list[dict[str, str]]:
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    if rows and LOAD_COLUMN[mode] not in rows[0]:
        raise PerfAnalyzerError(f"{path}: no {LOAD_COLUMN[mode]!r} column for a {mode} run")
    return rows


def _composing_models(csv_path: Path, mode: Mode) -> dict[float, list[ComposingModel]]:
    """Per load level, the composing models' rows from their own CSVs."""
    pattern = re.compile(r"(?P<model>.+)_v(?P<version>[^.]+)\." + re.escape(csv_path.name))
    by_load: dict[float, list[ComposingModel]] = {}
    for path in _composing_csvs(csv_path.parent, csv_path.name):
        match = pattern.fullmatch(path.name)
        if match is None:
            continue
        for row in _read_rows(path, mode):
            by_load.setdefault(_float(row, LOAD_COLUMN[mode], path), []).append(
                ComposingModel(
                    model=match["model"],
                    version=match["version"],
                    infer_per_sec=_float(row, "Inferences/Second", path),
                    overhead_us=_float(row, "Network+Server Send/Recv", path),
                    stages=_stages(row, path),
                )
            )
    return by_load


def parse_csv(csv_path: Path, mode: Mode, batch_size: int) -> list[Measurement]:
    """The measurements of a `--verbose-csv` report (and of its composing
    models' reports beside it), by increasing load."""
    if not csv_path.is_file():
        raise PerfAnalyzerError(f"perf_analyzer wrote no report at {csv_path}")
    composing = _composing_models(csv_path, mode)
    measurements = []
    for row in _read_rows(csv_path, mode):
        load = _float(row, LOAD_COLUMN[mode], csv_path)
        avg = row.get("Avg latency")
        measurements.append(
            Measurement(
                mode=mode,
                load=load,
                batch_size=batch_size,
                infer_per_sec=_float(row, "Inferences/Second", csv_path),
                p50_ms=_float(row, "p50 latency", csv_path) / 1000,
                p90_ms=_float(row, "p90 latency", csv_path) / 1000,
                p95_ms=_float(row, "p95 latency", csv_path) / 1000,
                p99_ms=_float(row, "p99 latency", csv_path) / 1000,
                avg_ms=float(avg) / 1000 if avg else None,
                client_send_us=_float(row, "Client Send", csv_path),
                client_recv_us=_float(row, "Client Recv", csv_path),
                network_us=_float(row, "Network+Server Send/Recv", csv_path),
                server=_stages(row, csv_path),
                composing=tuple(sorted(composing.get(load, []), key=lambda c: c.model)),
                gpu_metrics=_gpu_metrics(row),
            )
        )
    return sorted(measurements, key=lambda measurement: measurement.load)
