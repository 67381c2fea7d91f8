"""The CPUs the door counts the embedder's speed over (model_common.cores):
a cgroup's quota, v2 or v1, read from a cgroup tree laid out as the kernel's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from model_common.cores import quota_cpus, usable_cpus


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_v2_quota_allows_its_share_of_cpus(tmp_path: Path) -> None:
    _write(tmp_path / "pods" / "a" / "cpu.max", "150000 100000\n")
    assert quota_cpus(["0::/pods/a"], tmp_path) == 1.5


def test_a_v2_cgroup_without_a_quota_sets_none(tmp_path: Path) -> None:
    _write(tmp_path / "cpu.max", "max 100000\n")
    assert quota_cpus(["0::/"], tmp_path) is None


def test_a_v1_quota_is_read_from_the_cpu_controller(tmp_path: Path) -> None:
    _write(tmp_path / "cpu" / "node" / "cpu.cfs_quota_us", "50000\n")
    _write(tmp_path / "cpu" / "node" / "cpu.cfs_period_us", "100000\n")
    lines = ["4:memory:/elsewhere", "2:cpu,cpuacct:/node", "0::/"]
    assert quota_cpus(lines, tmp_path) == 0.5


def test_a_v1_cgroup_without_a_quota_sets_none(tmp_path: Path) -> None:
    _write(tmp_path / "cpu" / "cpu.cfs_quota_us", "-1\n")
    _write(tmp_path / "cpu" / "cpu.cfs_period_us", "100000\n")
    assert quota_cpus(["1:cpu:/"], tmp_path) is None


@pytest.mark.skipif(not Path("/proc/self/cgroup").exists(), reason="no /proc/self/cgroup here")
def test_this_process_may_use_at_most_its_affinity() -> None:
    assert 0 < usable_cpus() <= len(os.sched_getaffinity(0))
