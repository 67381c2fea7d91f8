"""The CPUs this process may use: its affinity, less where a cgroup's CPU
quota allows fewer (a Kubernetes pod's CPU limit, a scale-out node's quota);
the cgroup v2 `cpu.max` or v1 `cpu.cfs_quota_us` of the process's own
cgroup, as /proc/self/cgroup names it."""

from __future__ import annotations

import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def quota_cpus(cgroup_lines: list[str], root: Path = CGROUP_ROOT) -> float | None:
    """The CPUs the quota of the cgroup in `cgroup_lines` (/proc/self/cgroup's
    lines) allows, or None where it sets none."""
    for line in cgroup_lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            quota = _v2_quota(root / relative / "cpu.max")
        elif "cpu" in controllers.split(","):
            quota = _v1_quota(root / "cpu" / relative)
        else:
            continue
        if quota is not None:
            return quota
    return None


def _v2_quota(cpu_max: Path) -> float | None:
    try:
        limit, period = cpu_max.read_text().split()
    except (OSError, ValueError):
        return None
    return None if limit == "max" else int(limit) / int(period)


def _v1_quota(folder: Path) -> float | None:
    try:
        limit = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if limit <= 0 else limit / period


def usable_cpus() -> float:
    affinity = len(os.sched_getaffinity(0))
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return float(affinity)
    quota = quota_cpus(lines)
    return float(affinity) if quota is None else min(float(affinity), quota)
