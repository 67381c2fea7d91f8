"""Render the Helm chart (deploy/helm/triton-embeddings) offline with the helm
of the serving environment (requirements/serve.txt), for the chart's tests and for running its
balancer's Envoy configuration outside Kubernetes."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
HELM = REPO_ROOT / ".venv" / "bin" / "helm"
CHART = REPO_ROOT / "deploy" / "helm" / "triton-embeddings"
BALANCER_CONFIGMAP = "templates/balancer-configmap.yaml"


@dataclass(frozen=True)
class Endpoint:
    """One Triton server as the balancer reaches it."""

    address: str
    http_port: int
    grpc_port: int


@dataclass(frozen=True)
class BalancerPorts:
    """The balancer's listeners: gRPC, HTTP, the admin interface (loopback)
    and the stats listener (/stats/prometheus, /ready)."""

    grpc: int
    http: int
    admin: int
    stats: int


def helm() -> Path:
    if not HELM.is_file():
        raise FileNotFoundError(f"{HELM} is missing; run scripts/setup.sh")
    return HELM


def _run(arguments: Sequence[str]) -> str:
    done = subprocess.run(
        [str(helm()), *arguments], capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(arguments)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def _values_arguments(
    values_files: Sequence[Path], values: Mapping[str, Any] | None, workdir: Path
) -> list[str]:
    """-f for each file, then the overrides as one more values file (JSON is
    YAML), which keeps lists and types that --set would need escaped."""
    arguments = [argument for path in values_files for argument in ("-f", str(path))]
    if values:
        overrides = workdir / "overrides.json"
        overrides.write_text(json.dumps(values))
        arguments += ["-f", str(overrides)]
    return arguments


def lint_chart(
    values_files: Sequence[Path] = (),
    values: Mapping[str, Any] | None = None,
    chart: Path = CHART,
) -> str:
    """`helm lint --strict` (warnings fail too); its report."""
    with tempfile.TemporaryDirectory() as workdir:
        arguments = _values_arguments(values_files, values, Path(workdir))
        return _run(["lint", "--strict", str(chart), *arguments])


def render_chart(
    values: Mapping[str, Any] | None = None,
    values_files: Sequence[Path] = (),
    chart: Path = CHART,
    release: str = "emb",
    namespace: str = "default",
    show_only: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The documents `helm template` renders, in order, with `values_files`
    then `values` over the chart's values.yaml."""
    with tempfile.TemporaryDirectory() as workdir:
        arguments = _values_arguments(values_files, values, Path(workdir))
        arguments += [argument for template in show_only for argument in ("-s", template)]
        rendered = _run(["template", release, str(chart), "--namespace", namespace, *arguments])
    return [document for document in yaml.safe_load_all(rendered) if document]


def envoy_config(
    endpoints: Sequence[Endpoint],
    ports: BalancerPorts,
    balancer_values: Mapping[str, Any] | None = None,
) -> str:
    """The balancer's Envoy bootstrap (files/envoy.yaml) for fixed servers,
    with `balancer_values` over the chart's `balancer:` values."""
    balancer: dict[str, Any] = {
        **(balancer_values or {}),
        "endpoints": [
            {"address": e.address, "httpPort": e.http_port, "grpcPort": e.grpc_port}
            for e in endpoints
        ],
        "ports": {
            "grpc": ports.grpc,
            "http": ports.http,
            "admin": ports.admin,
            "stats": ports.stats,
        },
    }
    (configmap,) = render_chart({"balancer": balancer}, show_only=[BALANCER_CONFIGMAP])
    return str(configmap["data"]["envoy.yaml"])
