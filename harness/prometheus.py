"""A real Prometheus (Debian's package) as a child process on a free loopback
port, with its own storage, scraping what it is told to, and a small client
for its HTTP API: the scale-out cluster (harness/scale_out/cluster.py) and
the dashboard's test (tests/test_dashboard.py) both query one."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.ports import StartError, answers_ok, free_loopback_ports, stop, wait_until_ready

PROMETHEUS = Path("/usr/bin/prometheus")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class PrometheusError(RuntimeError):
    """Prometheus answered a query with an error (a bad expression, say)."""


@dataclass(frozen=True)
class Prometheus:
    process: subprocess.Popen[bytes]
    url: str

    def _get(self, path: str, **parameters: str) -> object:
        query = urllib.parse.urlencode(parameters)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as error:
            # A bad expression is a 400 whose body says why.
            body = json.loads(error.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"prometheus {path} {parameters}: {body}")
        return body["data"]

    def query(self, expression: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query (/api/v1/query) at Unix time `at` (default: now):
        one {"metric": labels, "value": [t, "v"]} per series."""
        parameters = {"query": expression}
        if at is not None:
            parameters["time"] = f"{at:.3f}"
        data = self._get("/api/v1/query", **parameters)
        assert isinstance(data, dict)
        return data["result"]

    def query_range(
        self, expression: str, start: float, end: float, step_s: float
    ) -> list[dict[str, Any]]:
        """/api/v1/query_range: one {"metric": labels, "values": [[t, "v"],
        ...]} per series."""
        data = self._get(
            "/api/v1/query_range",
            query=expression,
            start=f"{start:.3f}",
            end=f"{end:.3f}",
            step=f"{step_s:g}s",
        )
        assert isinstance(data, dict)
        return data["result"]

    def label_values(self, label: str, match: str) -> list[str]:
        """/api/v1/label/LABEL/values of the series `match` selects: what
        Grafana's label_values(match, label) variable query lists."""
        data = self._get(f"/api/v1/label/{label}/values", **{"match[]": match})
        assert isinstance(data, list)
        return [str(value) for value in data]

    def scraped(self, job: str) -> int:
        """How many of the job's targets answered their last scrape."""
        return sum(float(s["value"][1]) == 1 for s in self.query(f'up{{job="{job}"}}'))


def scrape_job(
    name: str,
    targets: Sequence[str],
    metrics_path: str = "/metrics",
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """One scrape_configs entry: static `targets`, each with `labels`."""
    group: dict[str, Any] = {"targets": list(targets)}
    if labels:
        group["labels"] = dict(labels)
    return {"job_name": name, "metrics_path": metrics_path, "static_configs": [group]}


def scrape_config(jobs: Sequence[dict[str, Any]], interval_s: float) -> dict[str, Any]:
    """A whole configuration: `jobs`, each scraped every `interval_s`."""
    return {
        "global": {
            "scrape_interval": f"{interval_s:g}s",
            "scrape_timeout": f"{round(interval_s * 800)}ms",
            "evaluation_interval": f"{interval_s:g}s",
        },
        "scrape_configs": list(jobs),
    }


@contextmanager
def running_prometheus(
    config: Mapping[str, Any],
    workdir: Path,
    targets_up: Mapping[str, int],
    command_prefix: Sequence[str] = (),
    error: type[StartError] = StartError,
) -> Iterator[Prometheus]:
    """Prometheus with `config` and its own storage under `workdir`, yielded
    once every job of `targets_up` has that many targets answering; stopped
    on exit. The config is written as JSON, which Prometheus reads as YAML.
    `command_prefix` runs it (e.g. taskset on a vCPU)."""
    (port,) = free_loopback_ports(1)
    config_path = workdir / "prometheus.yml"
    config_path.write_text(json.dumps(config, indent=2))
    log_path = workdir / "prometheus.log"
    command = [
        *command_prefix,
        str(PROMETHEUS),
        f"--config.file={config_path}",
        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d",
        "--log.level=warn",
    ]
    url = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    prometheus = Prometheus(process, url)

    def ready() -> bool:
        return answers_ok(f"{url}/-/ready") and all(
            prometheus.scraped(job) == count for job, count in targets_up.items()
        )

    try:
        wait_until_ready(
            ready,
            process,
            log_path,
            what="prometheus",
            timeout_s=START_TIMEOUT_S,
            interval_s=0.2,
            error=error,
        )
        yield prometheus
    finally:
        stop(process, STOP_TIMEOUT_S)
