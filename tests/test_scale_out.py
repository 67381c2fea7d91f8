"""The chart's data plane run for real on loopback (harness/scale_out/): three
replicas of the serve command, each a small node (a cgroup with a CPU quota,
on one vCPU), behind a real Envoy with the chart's balancer configuration,
scraped by a real Prometheus.
One cluster serves the whole module; each scenario runs once and its figures
are in perf/results/debian12-2core/scale_out.md (`python -m perf.scale_out`).

What must always hold (no failed request when a replica is killed, hung or
restarted; the autoscaling metric's direction) is asserted unmarked; the
speeds and times on these shared cores are marked `timing`, with the bounds
stated in harness/scale_out/scenarios.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
from embedding_requests import embed_float32
from scale_out_cluster import scale_out_cluster

from harness.scale_out import scenarios
from harness.scale_out.autoscaling import HPA_TOLERANCE, Autoscaling, chart_autoscaling
from harness.scale_out.cluster import Cluster

pytestmark = pytest.mark.scale_out

THROUGHPUT_SECONDS = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from scale_out_cluster(tmp_path_factory, "scale_out")


def test_every_replica_serves_through_the_balancer(cluster: Cluster) -> None:
    client = grpcclient.InferenceServerClient(cluster.envoy.grpc_url)
    assert embed_float32(client, ["through the balancer"]).shape == (1, 384)
    # Each replica's door reads its own embedder backlog: the tokenizer's
    # metrics URL is its own server's metrics port.
    for replica in cluster.replicas:
        url = replica.stub_environments()["tokenizer"]["EMBEDDING_METRICS_URL"]
        assert url == f"http://{replica.metrics_target}/metrics", replica.pod
    # Prometheus scrapes every replica and Envoy.
    assert cluster.prometheus.scraped("triton") == scenarios.REPLICAS
    assert cluster.prometheus.scraped("envoy") == 1


@pytest.fixture(scope="module")
def throughputs(cluster: Cluster) -> scenarios.Throughputs:
    return scenarios.throughput(cluster, THROUGHPUT_SECONDS)


def test_throughput_runs_without_failures(throughputs: scenarios.Throughputs) -> None:
    # The load follows the capacity measured first, so every request is one
    # the replicas can carry within the door's deadline.
    for result in (throughputs.probe, *throughputs.runs.values()):
        assert result.ok > 0 and not result.failures, (result.replicas, result.failures)


@pytest.mark.timing
@pytest.mark.parametrize("replicas", [2, 3])
def test_more_replicas_serve_as_much_per_cpu_second(
    throughputs: scenarios.Throughputs, replicas: int
) -> None:
    runs = throughputs.runs
    efficiency = runs[replicas].texts_per_cpu_s / runs[1].texts_per_cpu_s
    assert efficiency >= scenarios.MIN_SCALING_EFFICIENCY, {
        k: (round(r.texts_per_s, 1), round(r.texts_per_cpu_s, 1)) for k, r in runs.items()
    }


@pytest.mark.timing
def test_replicas_hold_their_quota_alike(throughputs: scenarios.Throughputs) -> None:
    shares = {k: r.quota_used for k, r in throughputs.runs.items()}
    for run in shares.values():
        assert sum(run) >= scenarios.QUOTA_HELD_SHARE * len(run), shares
        assert min(run) >= scenarios.QUOTA_ALIKE_SHARE * max(run), shares


@pytest.fixture(scope="module")
def steady(throughputs: scenarios.Throughputs) -> float:
    return scenarios.steady_rate(throughputs)


@pytest.fixture(scope="module")
def killed(cluster: Cluster, steady: float) -> scenarios.FaultResult:
    return scenarios.kill_one(cluster, steady)


def test_killed_replica_fails_no_request_and_its_traffic_moves(
    killed: scenarios.FaultResult,
) -> None:
    assert killed.outcomes and not killed.failures, killed.failures
    assert killed.ejected_s is not None, "Envoy kept routing to the killed replica"
    # The same arrival rate: the victim's share goes to the others. How
    # least-request balancing splits it between them varies from run to run,
    # so the survivors are held to it together, and each must still serve.
    rates = (killed.rates_before, killed.rates_after)
    victim_before = killed.rates_before[killed.victim]
    assert victim_before > 0 and killed.rates_after[killed.victim] == 0, rates
    survivors = [pod for pod in killed.rates_before if pod != killed.victim]
    assert all(killed.rates_after[pod] > 0 for pod in survivors), rates
    moved = sum(killed.rates_after[pod] - killed.rates_before[pod] for pod in survivors)
    assert moved > 0.5 * victim_before, rates


@pytest.mark.timing
def test_killed_replica_is_ejected_quickly(killed: scenarios.FaultResult) -> None:
    bound_s = scenarios.kill_ejection_bound_s(killed.rate_per_s)
    assert killed.ejected_s is not None and killed.ejected_s <= bound_s


@pytest.fixture(scope="module")
def hung(cluster: Cluster, steady: float, killed: scenarios.FaultResult) -> scenarios.FaultResult:
    return scenarios.hang_one(cluster, steady)


def test_hung_replica_fails_no_request(hung: scenarios.FaultResult) -> None:
    assert hung.outcomes and not hung.failures, hung.failures
    assert hung.ejected_s is not None, "Envoy kept routing to the hung replica"


@pytest.mark.timing
def test_hung_replica_keeps_p99_and_is_ejected(hung: scenarios.FaultResult) -> None:
    assert hung.p99_ms() <= scenarios.HUNG_P99_BOUND_S * 1000
    assert hung.ejected_s is not None and hung.ejected_s <= scenarios.HANG_EJECTION_BOUND_S


@pytest.fixture(scope="module")
def restarted(
    cluster: Cluster, steady: float, hung: scenarios.FaultResult
) -> scenarios.RollingRestart:
    return scenarios.rolling_restart(cluster, steady)


def test_rolling_restart_fails_no_request(restarted: scenarios.RollingRestart) -> None:
    assert restarted.outcomes and not restarted.failures, restarted.failures
    assert [r.exit_code for r in restarted.restarts] == [0] * scenarios.REPLICAS


@pytest.fixture(scope="module")
def autoscaling() -> Autoscaling:
    return chart_autoscaling()


@pytest.fixture(scope="module")
def scaling(
    cluster: Cluster,
    autoscaling: Autoscaling,
    throughputs: scenarios.Throughputs,
    restarted: scenarios.RollingRestart,
) -> scenarios.AutoscalingResult:
    return scenarios.autoscaling_signal(
        cluster,
        autoscaling,
        scenarios.overload_rate(throughputs.runs[scenarios.REPLICAS]),
        scenarios.AUTOSCALING_OVERLOAD_S,
        scenarios.AUTOSCALING_COOLDOWN_S,
    )


def test_autoscaling_metric_asks_for_more_replicas_under_overload(
    scaling: scenarios.AutoscalingResult,
) -> None:
    # Over the target, and more replicas asked for, while the overload lasts.
    during = [sample for sample in scaling.samples if sample.at_s <= scaling.load_end_s]
    threshold = scaling.autoscaling.target * (1 + HPA_TOLERANCE)
    over = [sample for sample in during if scaling.average(sample) > threshold]
    assert over, scaling.samples
    assert all(sample.desired > scaling.current for sample in over), scaling.samples


def test_autoscaling_metric_falls_back_when_load_stops(
    scaling: scenarios.AutoscalingResult,
) -> None:
    last = scaling.last
    assert last.at_s >= scaling.load_end_s + scenarios.AUTOSCALING_COOLDOWN_S - 5.0
    assert scaling.average(last) < scaling.autoscaling.target, scaling.samples
    assert last.desired < scaling.current, scaling.samples
