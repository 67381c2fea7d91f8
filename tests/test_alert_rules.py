"""The Prometheus rules (deploy/helm/triton-embeddings/files/prometheus-rules.yaml):
promtool accepts them and passes their unit tests
(tests/alerts/prometheus_rules_test.yaml), every alert has a case where it
fires and one where it stays silent, and every metric, label and value the
rules select is one a real server exposes (tritonserver under the launcher
and the edge with a tenant, after a request), so a renamed metric fails here
rather than silencing an alert."""

from __future__ import annotations

import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import yaml

from harness.edge import RunningEdge, running_edge, tenant_toml
from harness.helm import CHART
from harness.server import RunningServer
from server.paths import REPO_ROOT

PROMTOOL = Path("/usr/bin/promtool")
RULES = CHART / "files" / "prometheus-rules.yaml"
RULE_TESTS = REPO_ROOT / "tests" / "alerts" / "prometheus_rules_test.yaml"
SEVERITIES = {"critical", "warning"}
KEY = "alerts-key"
# A raw metric the rules select (not a recording rule's, which hold a colon,
# nor a name quoted as a label in label_replace), with its matchers.
SELECTOR = re.compile(r'(?<![\w:"])((?:nv|envoy)_[A-Za-z0-9_]+)\s*(?:\{([^}]*)\})?')
MATCHER = re.compile(r'([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
# One series of the text exposition format: name, labels, value.
SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+\S+")
EXPOSED_LABEL = re.compile(r'([A-Za-z_]\w*)="((?:[^"\\]|\\.)*)"')

Series = tuple[str, dict[str, str]]


def _promtool(*arguments: str) -> None:
    if not PROMTOOL.is_file():
        pytest.fail(f"{PROMTOOL} is missing: scripts/setup.sh installs Debian's prometheus")
    done = subprocess.run(
        [str(PROMTOOL), *arguments], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, f"promtool {' '.join(arguments)}:\n{done.stdout}{done.stderr}"


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [rule for rule in _rules() if "alert" in rule]


def test_promtool_checks_the_rules() -> None:
    _promtool("check", "rules", str(RULES))


def test_promtool_unit_tests_pass() -> None:
    _promtool("test", "rules", str(RULE_TESTS))


def test_every_alert_fires_in_a_case_and_stays_silent_in_another() -> None:
    """So that a new alert cannot go untested: each alert is expected to
    fire at some evaluation and expected silent ([]) at another."""
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    for alert in _alerts():
        name = alert["alert"]
        expected = [case["exp_alerts"] for case in cases if case["alertname"] == name]
        assert any(expected), f"{name}: no case where it fires"
        assert [] in expected, f"{name}: no case where it stays silent"
    assert {case["alertname"] for case in cases} <= {alert["alert"] for alert in _alerts()}


def test_every_alert_says_how_bad_and_what() -> None:
    for alert in _alerts():
        assert alert["labels"]["severity"] in SEVERITIES, alert["alert"]
        assert {"summary", "description"} <= set(alert["annotations"]), alert["alert"]


# --- the metrics a real server exposes ---------------------------------------


@pytest.fixture(scope="module")
def edge(
    triton_server: RunningServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningEdge]:
    """The edge with one tenant with both quotas, so each of its token
    buckets (tenant_NAME, tenant_NAME_texts) has its stats."""
    workdir = tmp_path_factory.mktemp("alert_rules")
    path = workdir / "tenants.toml"
    path.write_text(tenant_toml("alerts-tenant", [KEY], ["embed"], texts_rate=100))
    with running_edge(triton_server.endpoints, path, workdir / "state") as running:
        yield running


def _exposed(url: str) -> list[Series]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    series = []
    for line in lines:
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = dict(EXPOSED_LABEL.findall(match.group(2) or ""))
            series.append((match.group(1), labels))
    return series


def _matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    """Prometheus's matchers: an absent label is the empty string; regular
    expressions are anchored."""
    for name, operator, value in matchers:
        have = labels.get(name, "")
        if operator == "=" and have != value:
            return False
        if operator == "!=" and have == value:
            return False
        if operator == "=~" and not re.fullmatch(value, have):
            return False
        if operator == "!~" and re.fullmatch(value, have):
            return False
    return True


def _selectors() -> set[tuple[str, tuple[tuple[str, str, str], ...]]]:
    found = set()
    for rule in _rules():
        for name, body in SELECTOR.findall(str(rule["expr"])):
            found.add((name, tuple(MATCHER.findall(body))))
    return found


def _selector_text(name: str, matchers: tuple[tuple[str, str, str], ...]) -> str:
    shown = ", ".join(f'{label}{op}"{value}"' for label, op, value in matchers)
    return f"{name}{{{shown}}}"


def test_the_rules_read_what_a_running_server_exposes(
    triton_server: RunningServer, edge: RunningEdge
) -> None:
    client = httpclient.InferenceServerClient(edge.http_url)
    text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([["an alert rule's text"]], dtype=object))
    client.infer("embed", [text], headers={"authorization": f"Bearer {KEY}"})
    client.close()
    exposed = _exposed(f"http://{triton_server.endpoints.metrics_address}/metrics") + _exposed(
        f"http://{edge.endpoints.metrics_address}/stats/prometheus"
    )
    selectors = _selectors()
    assert {name for name, _ in selectors} >= {
        "nv_inference_request_success",
        "envoy_cluster_upstream_rq_time_bucket",
    }, "the pattern finds the rules' metrics"
    missing = [
        _selector_text(name, matchers)
        for name, matchers in sorted(selectors)
        if not any(n == name and _matches(labels, list(matchers)) for n, labels in exposed)
    ]
    assert not missing, f"selected by the rules, exposed by no series: {missing}"
    # Triton's series are per model; the latency target is one of Envoy's bucket bounds.
    for name, labels in exposed:
        if name.startswith("nv_inference_"):
            assert "model" in labels, name
    (target,) = [
        rule for rule in _rules() if rule.get("record") == "embeddings:slo_latency_target:info"
    ]
    bounds = {
        labels["le"] for name, labels in exposed if name == "envoy_cluster_upstream_rq_time_bucket"
    }
    assert target["labels"]["le"] in bounds, sorted(bounds)
