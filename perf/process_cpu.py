"""The CPU a served request costs in each process: tritonserver (its
frontends, the ensemble scheduler, C++ backends such as the serializer), each
Python-backend stage's stubs, and the load generator (this process's
children, perf_analyzer). Standard library and tritonclient only: the GPU
kit measures with it too."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import tritonclient.grpc as grpcclient

from harness.server import RunningServer
from server.health import child_pids

# The Python-backend stages, whose stubs are processes of their own.
STUB_STAGES = ("tokenizer", "embedder")
ROLES = ("tritonserver", *(f"{stage} stub" for stage in STUB_STAGES))


@dataclass(frozen=True)
class ProcessCpu:
    """CPU seconds per request answered, by process role (the stubs of one
    stage summed), and of the load generator."""

    by_role: dict[str, float]
    client: float
    requests: int

    def microseconds(self) -> dict[str, float]:
        return {
            **{role: 1e6 * self.by_role.get(role, 0.0) for role in ROLES},
            "perf_analyzer": 1e6 * self.client,
        }


def cpu_seconds(pid: int) -> float:
    """The CPU time a process has used so far, user and system."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _role(pid: int) -> str:
    """A stub's command line names its model instance (`embedder_0_1`)."""
    arguments = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    for stage in STUB_STAGES:
        if any(argument.startswith(f"{stage}_") for argument in arguments):
            return f"{stage} stub"
    return "tritonserver"


def _answered(client: grpcclient.InferenceServerClient, model: str) -> int:
    (stats,) = client.get_inference_statistics(model, as_json=True)["model_stats"]
    return int(stats["inference_stats"]["success"].get("count", 0))


@contextmanager
def cpu_per_request(server: RunningServer, model: str = "embed") -> Iterator[list[ProcessCpu]]:
    """CPU per request of `model` answered while the block runs; the list
    it yields holds the result once the block is done."""
    pids = [server.tritonserver_pid, *child_pids(server.tritonserver_pid)]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        before = {pid: cpu_seconds(pid) for pid in pids}
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        answered = _answered(client, model)
        found: list[ProcessCpu] = []
        yield found
        requests = max(1, _answered(client, model) - answered)
    by_role: dict[str, float] = {}
    for pid in pids:
        role = _role(pid)
        by_role[role] = by_role.get(role, 0.0) + (cpu_seconds(pid) - before[pid]) / requests
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_s = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    found.append(ProcessCpu(by_role, client_s / requests, requests))
