"""The soak's sampler, its analysis and its plots, without a server: this
process and children of its own watched for about a second and a half, a
Prometheus text served on loopback, synthetic series for the slopes."""

from __future__ import annotations

import http.server
import itertools
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.process_watch import ProcessSample, ProcessWatch, Sample, shm_bytes, triton_memory
from harness.soak_series import (
    MAX_POINTS,
    Series,
    growth_per_100k,
    series_of,
)
from perf.soak_plots import plot_series, plot_soak

MIB = 1 << 20
# Opens 20 files and starts 5 threads, then grows by 8 MiB every 0.1 s, 8 times.
CHILD = """
import threading, time
files = [open("/dev/null") for _ in range(20)]
for _ in range(5):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
blocks = []
for _ in range(8):
    blocks.append(b"\\1" * (8 << 20))
    time.sleep(0.1)
time.sleep(60)
"""
METRICS_TEXT = """\
# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes
# TYPE nv_cpu_memory_used_bytes gauge
nv_cpu_memory_used_bytes 834789376
nv_pinned_memory_pool_total_bytes 268435456
nv_inference_count{model="embed",version="1"} 12
nv_gpu_memory_used_bytes{gpu_uuid="GPU a b"} 1.5e9
"""


@pytest.fixture
def metrics_url() -> Iterator[str]:
    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  (the handler's name is http.server's)
            body = METRICS_TEXT.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass  # keeps the test output to the test's

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def _closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def test_watch_samples_processes_as_they_grow_and_end(tmp_path: Path, metrics_url: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.DEVNULL)
    reaped = subprocess.Popen(["sleep", "30"])
    zombie = subprocess.Popen(["sleep", "30"])  # killed, never reaped while watched
    watched = {"test": os.getpid(), "child": child.pid, "reaped": reaped.pid, "zombie": zombie.pid}
    started = time.monotonic()
    try:
        with ProcessWatch(
            lambda: dict(watched),
            lambda: int(1000 * (time.monotonic() - started)),
            metrics_url,
            interval_s=0.1,
            shm_dir=tmp_path,
        ) as watch:
            time.sleep(0.6)
            reaped.kill()
            reaped.wait()
            zombie.kill()
            time.sleep(0.05)  # the signal lands
            killed_at = len(watch.samples())
            time.sleep(0.85)
        samples = watch.samples()
    finally:
        for process in (child, reaped, zombie):
            process.kill()
            process.wait()

    assert len(samples) >= 10
    assert all(b.at_s > a.at_s and b.requests >= a.requests for a, b in itertools.pairwise(samples))
    assert all({"reaped", "zombie"} <= set(sample.processes) for sample in samples[: killed_at - 1])
    # The round in progress at the kill may still have read them.
    after = samples[killed_at + 1 :]
    assert len(after) >= 5
    assert all(set(sample.processes) == {"test", "child"} for sample in after)

    first, last = samples[0].processes["child"], samples[-1].processes["child"]
    assert last.pid == child.pid
    assert last.rss_bytes - first.rss_bytes > 48 * MIB
    assert last.fds == 3 + 20  # stdio, then the files it opened
    assert last.threads == 1 + 5
    assert samples[-1].processes["test"].threads >= 2  # the sampler's own thread among them
    assert all(sample.triton_memory["nv_cpu_memory_used_bytes"] == 834789376 for sample in samples)

    paths = plot_soak(samples, tmp_path / "plots")
    assert set(paths) == {"rss", "fds", "threads", "triton_memory", "shm"}
    for path in paths.values():
        assert path.read_bytes().startswith(b"\x89PNG")


def test_triton_memory_keeps_memory_metrics_and_misses_a_failed_scrape(metrics_url: str) -> None:
    assert triton_memory(metrics_url) == {
        "nv_cpu_memory_used_bytes": 834789376.0,
        "nv_pinned_memory_pool_total_bytes": 268435456.0,
        'nv_gpu_memory_used_bytes{gpu_uuid="GPU a b"}': 1.5e9,
    }
    assert triton_memory(_closed_port_url()) == {}


def test_shm_bytes_counts_written_pages_of_regular_files(tmp_path: Path) -> None:
    (tmp_path / "region").mkdir()
    (tmp_path / "region" / "written").write_bytes(b"\1" * 10_000)
    with (tmp_path / "sparse").open("wb") as sparse:
        sparse.truncate(64 * MIB)
    (tmp_path / "link").symlink_to(tmp_path / "region" / "written")
    assert 10_000 <= shm_bytes(tmp_path) < MIB


def test_a_failing_process_list_is_raised_on_exit() -> None:
    def processes() -> dict[str, int]:
        raise RuntimeError("listing failed")

    with pytest.raises(RuntimeError, match="listing failed"):
        with ProcessWatch(processes, lambda: 0, None, interval_s=0.01):
            time.sleep(0.05)


def _sample(at_s: float, requests: int, processes: dict[str, int], used: float) -> Sample:
    return Sample(
        at_s,
        requests,
        {label: ProcessSample(pid, rss, 10, 4) for label, (pid, rss) in _rss(processes).items()},
        {"nv_cpu_memory_used_bytes": used, "nv_cpu_memory_total_bytes": 8e9},
        4096,
    )


def _rss(processes: dict[str, int]) -> dict[str, tuple[int, int]]:
    return {label: (pid, 100 * MIB + pid) for label, pid in processes.items()}


def test_series_follow_labels_as_stubs_are_replaced() -> None:
    samples = [
        _sample(0.0, 0, {"tritonserver": 1, "stub m #2": 2}, 1e9),
        _sample(2.0, 50, {"tritonserver": 1, "stub m #2": 2}, 1.1e9),
        _sample(4.0, 90, {"tritonserver": 1, "stub m #3": 3}, 1.2e9),
    ]
    rss = series_of(samples, "rss_bytes")
    assert [(each.label, len(each.points)) for each in rss] == [
        ("tritonserver", 3),
        ("stub m #2", 2),
        ("stub m #3", 1),
    ]
    assert rss[2].points == ((4.0, 90, float(100 * MIB + 3)),)
    assert rss[0].in_bytes
    (used, total) = series_of(samples, "triton_memory")
    assert used.label == "triton nv_cpu_memory_used_bytes" and used.in_bytes
    assert [point[2] for point in used.points] == [1e9, 1.1e9, 1.2e9]
    assert not series_of(samples, "threads")[0].in_bytes
    (shm,) = series_of(samples, "shm_bytes")
    assert shm.in_bytes and len(shm.points) == 3
    with pytest.raises(ValueError, match="unknown metric"):
        series_of(samples, "vms")


def _linear(count: int, per_request: float, outlier_at: int | None = None) -> Series:
    points = tuple(
        (
            float(index),
            1000 * index,
            5e8 + per_request * 1000 * index + (1e12 if index == outlier_at else 0),
        )
        for index in range(count)
    )
    return Series("tritonserver", "rss_bytes", points)


def test_growth_is_the_theil_sen_slope_per_100k_requests() -> None:
    assert growth_per_100k(_linear(11, 2.5), after_s=0) == pytest.approx(250_000)
    # One spike would tilt a least-squares line by far more than the slope.
    assert growth_per_100k(_linear(11, 2.5, outlier_at=7), after_s=0) == pytest.approx(250_000)
    # Only the points from after_s on count: a steep warm-up is left out.
    warm_up = Series("gateway", "rss_bytes", ((0.0, 0, 0.0), *_linear(6, 1.0).points[1:]))
    assert growth_per_100k(warm_up, after_s=0.5) == pytest.approx(100_000)
    # Too many points for every pair: evenly spaced ones, the same slope.
    assert growth_per_100k(_linear(3 * MAX_POINTS, -0.5), after_s=0) == pytest.approx(-50_000)


def test_growth_needs_three_points_with_advancing_requests() -> None:
    assert growth_per_100k(_linear(2, 1.0), after_s=0) is None
    assert growth_per_100k(_linear(11, 1.0), after_s=9) is None
    idle = Series("envoy", "rss_bytes", tuple((float(i), 500, float(i)) for i in range(5)))
    assert growth_per_100k(idle, after_s=0) is None


def test_plot_series_draws_many_lines_and_panels(tmp_path: Path) -> None:
    many = [_linear(20, float(index)) for index in range(8)]
    many = [Series(f"stub m #{index}", each.metric, each.points) for index, each in enumerate(many)]
    path = plot_series(many, "Resident memory per process", "RSS (MiB)", tmp_path / "rss.png")
    assert path.stat().st_size > 0 and path.read_bytes().startswith(b"\x89PNG")
    panels = plot_series(
        many[:3], "Triton's memory metrics", "MiB", tmp_path / "a" / "t.png", panel_each=True
    )
    assert panels.read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="at least one point"):
        plot_series([Series("x", "fds", ())], "t", "y", tmp_path / "empty.png")
