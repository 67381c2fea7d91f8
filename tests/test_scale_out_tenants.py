"""The chart's data plane with tenants (harness/scale_out/tenants.py): three
replicas of the serve command, each with its edge on its public ports (as
the chart's pods run with `tenants.secret`), behind a real Envoy with the
chart's balancer configuration, scraped by a real Prometheus. A tenant
within its quota fails no request while a replica is killed and while the
replicas restart in turn; a second tenant flooding beside it past its own
quota is refused at the edges with RESOURCE_EXHAUSTED.

Only those two scenarios run here, on a cluster of their own; throughput,
the hung replica and the autoscaling signal run without tenants, the
chart's default, in tests/test_scale_out.py. The figures are in
perf/scale_out.py's report."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
from scale_out_cluster import scale_out_cluster
from tritonclient.utils import InferenceServerException

from harness.requests import text_inputs
from harness.scale_out import scenarios, tenants
from harness.scale_out.cluster import EDGE_JOB, Cluster

pytestmark = pytest.mark.scale_out

# Shorter than tests/test_scale_out.py's: the kill's bounds are held there.
KILL_BEFORE_S = 4.0
KILL_AFTER_S = 8.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from scale_out_cluster(tmp_path_factory, "scale_out_tenants", tenants.tenants_file())


def _infer_status(url: str, key: str | None) -> str:
    client = grpcclient.InferenceServerClient(url)
    headers = None if key is None else {"authorization": f"Bearer {key}"}
    try:
        client.infer(tenants.MODEL, text_inputs(grpcclient, ["through the edge"]), headers=headers)
    except InferenceServerException as error:
        return str(error.status())
    return "OK"


def test_every_replica_serves_tenants_through_its_edge(cluster: Cluster) -> None:
    steady_key = tenants.KEYS[tenants.STEADY]
    assert _infer_status(cluster.envoy.grpc_url, steady_key) == "OK"
    assert _infer_status(cluster.envoy.grpc_url, None) == "StatusCode.UNAUTHENTICATED"
    for replica in cluster.replicas:
        # The replica's public port is its edge, and the balancer's health
        # check (keyless /v2/health/ready) passes it.
        assert _infer_status(replica.grpc_url, steady_key) == "OK", replica.pod
        assert _infer_status(replica.grpc_url, None) == "StatusCode.UNAUTHENTICATED"
        assert replica.is_ready(), replica.pod
    assert len(cluster.envoy.routable_ports()) == scenarios.REPLICAS
    # Prometheus scrapes every edge's per-tenant stats beside Triton's metrics.
    assert cluster.prometheus.scraped(EDGE_JOB) == scenarios.REPLICAS
    assert cluster.prometheus.scraped("triton") == scenarios.REPLICAS


@pytest.fixture(scope="module")
def steady(cluster: Cluster) -> float:
    return tenants.steady_rate(cluster)


@pytest.fixture(scope="module")
def killed(cluster: Cluster, steady: float) -> scenarios.FaultResult:
    return scenarios.kill_one(
        cluster,
        steady,
        KILL_BEFORE_S,
        KILL_AFTER_S,
        key=tenants.KEYS[tenants.STEADY],
        flood=tenants.flood(),
    )


def test_killed_replica_fails_no_request_of_a_tenant_within_its_quota(
    killed: scenarios.FaultResult,
) -> None:
    assert killed.outcomes and not killed.failures, killed.failures
    assert killed.ejected_s is not None, "Envoy kept routing to the killed replica"


@pytest.fixture(scope="module")
def restarted(
    cluster: Cluster, steady: float, killed: scenarios.FaultResult
) -> scenarios.RollingRestart:
    return scenarios.rolling_restart(
        cluster, steady, key=tenants.KEYS[tenants.STEADY], flood=tenants.flood()
    )


def test_rolling_restart_fails_no_request_of_a_tenant_within_its_quota(
    restarted: scenarios.RollingRestart,
) -> None:
    assert restarted.outcomes and not restarted.failures, restarted.failures
    assert [r.exit_code for r in restarted.restarts] == [0] * scenarios.REPLICAS


@pytest.mark.parametrize("scenario", ["killed", "restarted"])
def test_a_flood_beside_it_is_refused_at_the_edges(
    request: pytest.FixtureRequest, scenario: str
) -> None:
    result: scenarios.FaultResult | scenarios.RollingRestart = request.getfixturevalue(scenario)
    restarts = 1 if isinstance(result, scenarios.FaultResult) else scenarios.REPLICAS
    flood = tenants.FloodFigures.of(result.flood, restarts)
    # The pods' quotas together let through at most its allowance; every
    # request beyond it is refused at an edge, never by Triton's door.
    assert flood.answered > 0 and flood.answered <= flood.allowance, flood
    assert flood.refused >= flood.sent - flood.allowance, flood
