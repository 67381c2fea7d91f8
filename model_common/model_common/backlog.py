"""Counts of requests between the tokenizer and an embedder, shared by the
stages' processes through files the launcher's server gives them.

The tokenizer adds the requests it releases to the embedder; the embedder
adds the requests it starts to execute. Their difference is the embedder's
backlog (queued, or between the stages) plus an offset that drifts when a
request leaves the embedder's queue without being executed (its deadline
passed) or reaches the embedder without the tokenizer (`embed_tokens`):
model_common.admission corrects it from Triton's own gauge.

The embedder also counts its work: the real tokens it runs and the CPU
time its process spends running them, from which the tokenizer derives how
many tokens are a given time of work on this machine (model_common.admission).

Each process writes one 8-byte count of its own, named by its model
instance, in a memory-mapped file: one writer per count, so no locks, and
an aligned 8-byte store is read whole. A restarted stub of the same
instance opens its file again and counts on from its value.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

# The folder the launcher creates for one tritonserver run and removes after it.
BACKLOG_DIR_VARIABLE = "EMBEDDING_BACKLOG_DIR"
RELEASED = "released"
STARTED = "started"
RAN_TOKENS = "ran_tokens"
RAN_CPU_US = "ran_cpu_us"
COUNT_BYTES = 8


class Count:
    """One process's count, memory-mapped."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(descriptor).st_size < COUNT_BYTES:
                os.ftruncate(descriptor, COUNT_BYTES)
            self._map = mmap.mmap(descriptor, COUNT_BYTES)
        finally:
            os.close(descriptor)
        self._value = memoryview(self._map).cast("q")

    @property
    def value(self) -> int:
        return int(self._value[0])

    def add(self, count: int) -> None:
        self._value[0] += count


class Backlog:
    """Released minus started, summed over every instance's count."""

    def __init__(self, embedder: str) -> None:
        base = os.environ.get(BACKLOG_DIR_VARIABLE)
        if not base:
            raise ValueError(
                f"{BACKLOG_DIR_VARIABLE} is not set: start the server with server/launch.py, "
                "which gives its stages a folder there"
            )
        self._folder = Path(base) / embedder
        self._counts: dict[Path, Count] = {}

    def own(self, kind: str, instance: str) -> Count:
        """The calling instance's count of `kind`."""
        return Count(self._folder / f"{kind}.{instance}")

    def rescan(self) -> None:
        """Maps the counts of instances started since: a new stub's file."""
        self._folder.mkdir(parents=True, exist_ok=True)
        for path in self._folder.iterdir():
            if path not in self._counts:
                self._counts[path] = Count(path)

    def _total(self, kind: str) -> int:
        prefix = f"{kind}."
        return sum(
            count.value for path, count in self._counts.items() if path.name.startswith(prefix)
        )

    def value(self) -> int:
        return self._total(RELEASED) - self._total(STARTED)

    def work(self) -> tuple[int, float]:
        """The real tokens every instance of the embedder ran, and the CPU
        seconds they took."""
        return self._total(RAN_TOKENS), self._total(RAN_CPU_US) / 1e6
