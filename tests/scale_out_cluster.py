"""The module-scoped cluster of the scale-out test modules: the chart's data
plane on loopback (harness/scale_out/cluster.py), skipped with the reason
where this machine lacks a part of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.scale_out import scenarios
from harness.scale_out.cluster import Cluster, missing_parts, running_cluster


def scale_out_cluster(
    tmp_path_factory: pytest.TempPathFactory, name: str, tenants_toml: str | None = None
) -> Iterator[Cluster]:
    """scenarios.REPLICAS replicas; with `tenants_toml`, each behind its edge."""
    missing = missing_parts()
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    workdir = tmp_path_factory.mktemp(name)
    tenants_path = None
    if tenants_toml is not None:
        tenants_path = workdir / "tenants.toml"
        tenants_path.write_text(tenants_toml)
    with running_cluster(
        workdir, scenarios.REPLICAS, scenarios.CPUS_PER_REPLICA, tenants_path
    ) as running:
        yield running
