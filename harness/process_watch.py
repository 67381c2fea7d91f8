"""A background sampler for soak runs: every few seconds, each watched
process's resident memory, open descriptors and threads, Triton's memory
metrics and the size of the shared-memory folder, each sample stamped with
the requests answered so far (the x axis of the growth checks,
harness/soak_series.py)."""

from __future__ import annotations

import http.client
import os
import stat
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

# A scrape slower than this is recorded as missing: the sampler must keep its
# cadence beside a load that saturates the machine's cores.
SCRAPE_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class ProcessSample:
    pid: int
    rss_bytes: int
    fds: int
    threads: int


@dataclass(frozen=True)
class Sample:
    """One round. `processes` is keyed by the caller's label; a process that
    ended before it was read is absent. `triton_memory` (name{labels} ->
    value) is empty where the scrape failed or no metrics URL was given."""

    at_s: float  # since the watch began
    requests: int
    processes: dict[str, ProcessSample]
    triton_memory: dict[str, float]
    shm_bytes: int


class ProcessWatch:
    """Samples every `interval_s` on a daemon thread while entered.
    `processes` (label -> pid) and `requests` are called on that thread, once
    per round. Where either raises, sampling stops and the error is raised
    again on exit, so a soak never reports a silently truncated series."""

    def __init__(
        self,
        processes: Callable[[], dict[str, int]],
        requests: Callable[[], int],
        metrics_url: str | None,
        interval_s: float = 2.0,
        shm_dir: Path = Path("/dev/shm"),
    ) -> None:
        self._processes = processes
        self._requests = requests
        self._metrics_url = metrics_url
        self._interval_s = interval_s
        self._shm_dir = shm_dir
        self._samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="process-watch", daemon=True)
        self._error: Exception | None = None
        self._started = 0.0

    def __enter__(self) -> ProcessWatch:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        if self._error is not None and error is None:
            raise self._error

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def _run(self) -> None:
        rounds = 0
        while True:
            try:
                sample = self._sample()
            except Exception as error:  # raised again on exit
                self._error = error
                return
            with self._lock:
                self._samples.append(sample)
            # Deadlines on a fixed grid: a slow round shortens the next wait
            # instead of drifting every later sample.
            rounds += 1
            wait_s = self._started + rounds * self._interval_s - time.monotonic()
            if self._stop.wait(max(wait_s, 0.0)):
                return

    def _sample(self) -> Sample:
        at_s = time.monotonic() - self._started
        requests = self._requests()
        processes = {
            label: sample
            for label, pid in self._processes().items()
            if (sample := process_sample(pid)) is not None
        }
        memory = triton_memory(self._metrics_url) if self._metrics_url else {}
        return Sample(at_s, requests, processes, memory, shm_bytes(self._shm_dir))


def process_sample(pid: int) -> ProcessSample | None:
    """RSS, descriptors and threads of `pid`, or None where it has ended. A
    zombie (ended, not yet reaped) has no VmRSS line and counts as ended."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = {name: value for name, _, value in (line.partition(":") for line in lines)}
    if "VmRSS" not in fields:
        return None
    rss_kib = int(fields["VmRSS"].split()[0])
    return ProcessSample(pid, rss_kib * 1024, fds, int(fields["Threads"]))


def triton_memory(metrics_url: str) -> dict[str, float]:
    """Every sample of the Prometheus text at `metrics_url` whose metric name
    contains "memory", as name{labels} -> value; empty where the scrape fails."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=SCRAPE_TIMEOUT_S) as response:
            text = response.read().decode()
    except (OSError, http.client.HTTPException):  # URLError is an OSError
        return {}
    memory = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        # A label value may hold spaces; the value follows the closing brace.
        if "}" in line:
            labelled, _, rest = line.rpartition("}")
            key = labelled + "}"
        else:
            key, _, rest = line.partition(" ")
        if "memory" in key.partition("{")[0]:
            memory[key] = float(rest.split()[0])
    return memory


def shm_bytes(folder: Path) -> int:
    """Memory held by the regular files under `folder`. Allocated blocks, not
    st_size: tmpfs holds whole pages, and only those written, so an 8-byte
    backlog count takes 4 KiB and a sparse file's unwritten tail none."""
    total = 0
    for directory, _, names in os.walk(folder):
        for name in names:
            try:
                status = os.lstat(os.path.join(directory, name))
            except FileNotFoundError:
                continue  # removed since the folder was listed
            if stat.S_ISREG(status.st_mode):
                total += status.st_blocks * 512
    return total
