"""Resident memory per served model: the Python-backend stubs of a model's
tokenizer and embedder instances, found by the model file each stub runs
(its second argument), children of one tritonserver.

PSS (proportional set size) shares each page among the processes that map
it, so PSS figures add up to what the machine holds; RSS counts a shared
library in every process."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from server.catalog import CatalogModel


@dataclass(frozen=True)
class Memory:
    processes: int
    rss_mib: float
    pss_mib: float


def _kib(pid: int, field: str) -> int:
    """A field of /proc/<pid>/smaps_rollup, in KiB."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise ValueError(f"/proc/{pid}/smaps_rollup has no {field}")


def _children(parent: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent:
            children.append(int(entry))
    return children


def _model_file(pid: int) -> Path | None:
    arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return Path(arguments[1].decode()) if len(arguments) > 1 else None


def model_memory(tritonserver_pid: int, repository: Path, model: CatalogModel) -> Memory:
    """What `model`'s stages hold in the server `tritonserver_pid` serving
    `repository`."""
    folders = {repository / model.tokenizer, repository / model.engine_stage}
    stubs = [
        pid
        for pid in _children(tritonserver_pid)
        if (path := _model_file(pid)) is not None and path.parent.parent in folders
    ]
    return Memory(
        len(stubs),
        sum(_kib(pid, "Rss") for pid in stubs) / 1024,
        sum(_kib(pid, "Pss") for pid in stubs) / 1024,
    )


def server_memory(tritonserver_pid: int) -> Memory:
    """tritonserver's own process: the core, the backends, the C++
    serializer, shared by every model."""
    return Memory(1, _kib(tritonserver_pid, "Rss") / 1024, _kib(tritonserver_pid, "Pss") / 1024)
