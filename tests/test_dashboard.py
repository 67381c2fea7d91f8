"""The Grafana dashboard (deploy/helm/triton-embeddings/files/dashboard.json)
against the real service: a tritonserver with tenants behind the edge
(Envoy), a real Prometheus scraping Triton's /metrics and the edge's
/stats/prometheus every second, load with refusals of each reason the
dashboard shows (a wrong key, a model the key may not call, over a
requests quota, over a texts quota, over the requests in flight, a queue
deadline that expires), then every panel's every query, its template
variables replaced by the values Grafana would put there, must run and
return at least one series. The GPU panels' queries must run too; where
this machine has no GPU and no DCGM exporter their series are missing, and
that check is skipped, naming the reason (NO_SERIES_HERE)."""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from harness.edge import RunningEdge, running_edge, tenant_toml
from harness.helm import CHART
from harness.prometheus import (
    PROMETHEUS,
    Prometheus,
    running_prometheus,
    scrape_config,
    scrape_job,
)
from harness.server import RunningServer
from server.edge.config import STATS_PATH

DASHBOARD_PATH = CHART / "files" / "dashboard.json"
DASHBOARD: dict[str, Any] = json.loads(DASHBOARD_PATH.read_text())
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCRAPE_INTERVAL_S = 1.0
# What Grafana makes of $__rate_interval at the chart's 15 s scrape interval
# (four scrapes); at this test's 1 s scrape it holds the whole load.
RATE_INTERVAL = "1m"
# Panels whose series only GPU deployments have: their queries still run
# (Prometheus must accept them); only "has a series" is skipped, for this.
NO_SERIES_HERE = {
    "GPU utilization": "no GPU (nv_gpu_utilization) and no DCGM exporter on this machine",
    "GPU memory used": "no GPU (nv_gpu_memory_used_bytes) and no DCGM exporter on this machine",
}
# Panels whose every query must show a refusal the load made (a value > 0).
REFUSAL_PANELS = (
    "Refused by Triton, by model and reason",
    "Refused at the edge, by tenant and reason",
    "Answered by the edge itself",
)

SEARCH_KEY = "search-key"
SLOW_KEY = "slow-key"
TEXTS_KEY = "texts-key"
NARROW_KEY = "narrow-key"
SLOW_RATE = 2
TEXTS_RATE = 8
TENANTS = (
    tenant_toml("search", [SEARCH_KEY], ["embed"])
    + tenant_toml("slow", [SLOW_KEY], ["embed"], rate=SLOW_RATE)
    + tenant_toml("texts", [TEXTS_KEY], ["embed"], texts_rate=TEXTS_RATE)
    + tenant_toml("narrow", [NARROW_KEY], ["embed"], in_flight=1)
)
TENANT_NAMES = {"search", "slow", "texts", "narrow"}
STEADY_S = 6.0
# Requests sent at once to go over a bound: the load pool's threads less
# the two of the steady traffic.
BURST = 6
SHORT_TEXTS = [f"a short text about embeddings, number {i}" for i in range(8)]
LONG_TEXTS = ["a longer text that keeps an instance busy for a while " * 12] * 32


def _panels() -> list[dict[str, Any]]:
    """Every panel but the rows, which only group them."""
    return [panel for panel in DASHBOARD["panels"] if panel["type"] != "row"]


def _targets() -> list[tuple[str, dict[str, Any]]]:
    return [(panel["title"], target) for panel in _panels() for target in panel["targets"]]


# --- the file itself ----------------------------------------------------------


def test_every_panel_has_a_datasource_and_a_query() -> None:
    assert DASHBOARD["schemaVersion"] >= 39
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"model", "tenant"} <= set(variables)
    ids = [panel["id"] for panel in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    for panel in _panels():
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]
            # Only the dashboard's own variables and Grafana's interval.
            used = set(re.findall(r"\$(?:\{)?(\w+)", target["expr"])) - {"1"}
            assert used <= set(variables) | {"__rate_interval"}, (panel["title"], used)
    assert set(NO_SERIES_HERE) <= {panel["title"] for panel in _panels()}
    assert set(REFUSAL_PANELS) <= {panel["title"] for panel in _panels()}


# --- against a live Prometheus ------------------------------------------------


@dataclass(frozen=True)
class Stack:
    server: RunningServer
    edge: RunningEdge
    prometheus: Prometheus


@pytest.fixture(scope="module")
def stack(
    triton_server: RunningServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The session's server behind an edge with four tenants, scraped every
    second, after the load (drive_load)."""
    if not PROMETHEUS.exists():
        pytest.skip(f"needs {PROMETHEUS} (apt-get install prometheus, scripts/setup.sh)")
    workdir = tmp_path_factory.mktemp("dashboard")
    tenants = workdir / "tenants.toml"
    tenants.write_text(TENANTS)
    with running_edge(triton_server.endpoints, tenants, workdir / "edge") as edge:
        # The edge's admin port serves the same /stats/prometheus that the
        # launcher's edge passes on at the metrics port + 1.
        config = scrape_config(
            [
                scrape_job("triton", [triton_server.endpoints.metrics_address]),
                scrape_job("edge", [edge.endpoints.metrics_address], STATS_PATH),
            ],
            SCRAPE_INTERVAL_S,
        )
        with running_prometheus(config, workdir, {"triton": 1, "edge": 1}) as prometheus:
            drive_load(edge)
            # The counters' last values, scraped.
            time.sleep(2.5 * SCRAPE_INTERVAL_S)
            yield Stack(triton_server, edge, prometheus)


def _bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _grpc(url: str, key: str, texts: list[str], **options: Any) -> str:
    """ "OK", or the gRPC status of the refusal."""
    batch = np.array([[text.encode()] for text in texts], dtype=np.object_)
    tensor = grpcclient.InferInput("TEXT", list(batch.shape), "BYTES")
    tensor.set_data_from_numpy(batch)
    client = grpcclient.InferenceServerClient(url)
    try:
        client.infer("embed", [tensor], headers=_bearer(key), **options)
    except InferenceServerException as error:
        return str(error.status())
    finally:
        client.close()
    return "OK"


def _http(url: str, key: str, model: str = "embed", texts: int = 1) -> int:
    host, port = url.split(":")
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "TEXT",
                    "shape": [texts, 1],
                    "datatype": "BYTES",
                    "data": SHORT_TEXTS[:texts],
                }
            ]
        }
    )
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", f"/v2/models/{model}/infer", body, _bearer(key))
        reply = connection.getresponse()
        reply.read()
        return reply.status
    finally:
        connection.close()


def drive_load(edge: RunningEdge) -> None:
    """Steady traffic of one tenant over both protocols, and beside it a
    refusal of each reason the dashboard shows; asserts each came as meant,
    so a panel that shows nothing is the panel's fault."""
    deadline = time.monotonic() + STEADY_S

    def steady_grpc() -> set[str]:
        seen = set()
        while time.monotonic() < deadline:
            seen.add(_grpc(edge.grpc_url, SEARCH_KEY, SHORT_TEXTS))
        return seen

    def steady_http() -> set[int]:
        seen = set()
        while time.monotonic() < deadline:
            seen.add(_http(edge.http_url, SEARCH_KEY, texts=4))
        return seen

    with ThreadPoolExecutor(BURST + 2) as pool:
        steady = [pool.submit(steady_grpc), pool.submit(steady_http)]
        time.sleep(1.0)
        # A wrong key (401) and a model the key may not call (403), over HTTP,
        # where Envoy counts the status; over gRPC too.
        assert [_http(edge.http_url, "wrong-key") for _ in range(3)] == [401] * 3
        assert [_http(edge.http_url, SEARCH_KEY, "embedder") for _ in range(3)] == [403] * 3
        assert _grpc(edge.grpc_url, "wrong-key", SHORT_TEXTS) == "StatusCode.UNAUTHENTICATED"
        # Over the requests quota (a bucket of SLOW_RATE) and the texts quota
        # (TEXTS_RATE): at once, so that no refill comes between, however
        # slow the machine.
        slow = list(pool.map(lambda _: _http(edge.http_url, SLOW_KEY), range(BURST)))
        assert 429 in slow, slow
        texts = list(
            pool.map(lambda _: _grpc(edge.grpc_url, TEXTS_KEY, SHORT_TEXTS[:4]), range(BURST))
        )
        assert "StatusCode.RESOURCE_EXHAUSTED" in texts, texts
        # Over the requests in flight (1): long requests at once.
        narrow = list(
            pool.map(lambda _: _grpc(edge.grpc_url, NARROW_KEY, LONG_TEXTS), range(BURST))
        )
        assert "StatusCode.UNAVAILABLE" in narrow and "OK" in narrow, narrow
        # A queue deadline of 1 us, which expires in Triton's queue.
        expired = [_grpc(edge.grpc_url, SEARCH_KEY, SHORT_TEXTS, timeout=1) for _ in range(3)]
        assert set(expired) == {"StatusCode.UNAVAILABLE"}, expired
        assert steady[0].result() == {"OK"} and steady[1].result() == {200}


def _grafana_regex(values: list[str]) -> str:
    """A multi-value variable as Grafana writes it into a Prometheus query:
    the values, regex characters escaped (doubled for PromQL's string), as
    alternatives."""
    escaped = [re.sub(r"([$^*{}\[\]'+?.()|\\])", r"\\\\\1", value) for value in values]
    return "(" + "|".join(escaped) + ")"


def _variable_values(prometheus: Prometheus, variable: dict[str, Any]) -> list[str]:
    """What Grafana lists for a query variable: label_values(SELECTOR,
    LABEL), through the variable's regex (its first group) where it has one."""
    query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
    found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
    assert found, query
    values = prometheus.label_values(found.group(2), found.group(1))
    if variable.get("regex"):
        pattern = re.compile(variable["regex"].strip("/"))
        values = [
            m.group(1) if m.groups() else m.group(0) for v in values if (m := pattern.match(v))
        ]
    return sorted(set(values))


@pytest.fixture(scope="module")
def variables(stack: Stack) -> dict[str, list[str]]:
    """Each query variable's values: "All", as the dashboard opens."""
    return {
        variable["name"]: _variable_values(stack.prometheus, variable)
        for variable in DASHBOARD["templating"]["list"]
        if variable["type"] == "query"
    }


def _expression(expr: str, variables: dict[str, list[str]]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    for name, values in variables.items():
        # Backslashes doubled: re.sub reads its replacement's escapes.
        replacement = _grafana_regex(values).replace("\\", "\\\\")
        expr = re.sub(rf"\$\{{{name}\}}|\${name}\b", replacement, expr)
    return expr


def test_variables_list_the_models_and_tenants(variables: dict[str, list[str]]) -> None:
    assert {"embed", "tokenizer", "embedder", "serializer"} <= set(variables["model"])
    assert set(variables["tenant"]) == TENANT_NAMES


@pytest.mark.parametrize(
    ("title", "target"),
    _targets(),
    ids=[f"{title} [{target['refId']}]" for title, target in _targets()],
)
def test_every_query_returns_series(
    stack: Stack, variables: dict[str, list[str]], title: str, target: dict[str, Any]
) -> None:
    # A query Prometheus refuses raises here, exempt panel or not.
    series = stack.prometheus.query(_expression(target["expr"], variables))
    if not series and title in NO_SERIES_HERE:
        pytest.skip(f"{title}: {NO_SERIES_HERE[title]}")
    assert series, f"{title}: {target['expr']}"


@pytest.mark.parametrize("title", REFUSAL_PANELS)
def test_the_refusals_show(stack: Stack, variables: dict[str, list[str]], title: str) -> None:
    """Each refusal query of the panel shows the load's refusals: a series
    above zero."""
    (panel,) = [p for p in _panels() if p["title"] == title]
    for target in panel["targets"]:
        series = stack.prometheus.query(_expression(target["expr"], variables))
        values = {json.dumps(s["metric"]): float(s["value"][1]) for s in series}
        assert any(value > 0 for value in values.values()), (target["legendFormat"], values)
