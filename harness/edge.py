"""The edge (server.edge: Envoy enforcing a tenants file) in front of a
running tritonserver, on free loopback ports, for the tests."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.ports import StartError, free_loopback_ports
from harness.server import EndpointUrls
from server.edge import Edge, find_envoy
from server.edge.config import EdgePorts
from server.edge.plan import EnvoyPlan
from server.edge.tracing import EdgeTracing
from server.launch_plan import Endpoints
from server.shutdown_timings import EXIT_TIMEOUT_S
from server.tenants import CatalogStages, read_tenants


class EdgeStartError(StartError):
    pass


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def tenant_toml(
    name: str,
    keys: list[str],
    models: list[str],
    *,
    rate: int = 1000,
    priority: str = "interactive",
    in_flight: int = 16,
    texts_rate: int | None = None,
) -> str:
    """One [[tenants]] table, its keys hashed; `texts_rate`: its
    texts_per_second, None for none."""
    hashes = ", ".join(f'"{key_hash(key)}"' for key in keys)
    model_list = ", ".join(f'"{model}"' for model in models)
    texts = "" if texts_rate is None else f"texts_per_second = {texts_rate}\n"
    return (
        "[[tenants]]\n"
        f'name = "{name}"\n'
        f"key_sha256 = [{hashes}]\n"
        f"requests_per_second = {rate}\n"
        f"{texts}"
        f'priority = "{priority}"\n'
        f"max_in_flight = {in_flight}\n"
        f"models = [{model_list}]\n\n"
    )


@dataclass(frozen=True)
class RunningEdge(EndpointUrls):
    """The edge's public ports are `endpoints`; its admin port stands for metrics."""

    edge: Edge
    tenants_path: Path
    endpoints: Endpoints
    catalog: CatalogStages | None = None

    def reload(self) -> str | None:
        """Applies the tenants file as it is now: None, or why it was refused."""
        tenants = read_tenants(self.tenants_path, self.catalog)
        if isinstance(tenants, list):
            return "\n".join(tenants)
        return self.edge.apply(tenants)


@contextmanager
def running_edge(
    triton: Endpoints,
    tenants_path: Path,
    workdir: Path,
    catalog: CatalogStages | None = None,
    tracing: EdgeTracing | None = None,
) -> Iterator[RunningEdge]:
    """Envoy on free loopback ports in front of `triton`, enforcing the
    tenants file; stopped on exit. `catalog` (Catalog.stages): as the
    launcher's edge, tenants may read their models' stages; None: their
    models' entry points only. `tracing`: the edge's spans, as the
    launcher's edge sends them with --otlp-endpoint."""
    envoy = find_envoy()
    if isinstance(envoy, str):
        raise EdgeStartError(envoy)
    tenants = read_tenants(tenants_path, catalog)
    if isinstance(tenants, list):
        raise EdgeStartError("\n".join(tenants))
    http, grpc, admin = free_loopback_ports(3)
    ports = EdgePorts(
        "127.0.0.1", http, grpc, admin, triton.host, triton.http_port, triton.grpc_port
    )
    edge = Edge(EnvoyPlan(ports, workdir, envoy, tracing=tracing))
    error = edge.start(tenants)
    if error is not None:
        raise EdgeStartError(error)
    try:
        yield RunningEdge(edge, tenants_path, Endpoints("127.0.0.1", http, grpc, admin), catalog)
    finally:
        edge.stop(EXIT_TIMEOUT_S)


@contextmanager
def edge_for_tenants(
    triton: Endpoints, tenants: str, workdir: Path, catalog: CatalogStages | None = None
) -> Iterator[RunningEdge]:
    """running_edge on a tenants file holding `tenants` (TOML), written in
    `workdir`, the edge's state beside it."""
    path = workdir / "tenants.toml"
    path.write_text(tenants)
    with running_edge(triton, path, workdir / "state", catalog) as running:
        yield running


def edge_command(
    tenants_path: Path, triton: Endpoints, state_dir: Path, *extra: str
) -> tuple[list[str], Endpoints]:
    """`python -m server.edge` on free loopback ports in front of `triton`
    (more options in `extra`), and those ports."""
    http, grpc, admin = free_loopback_ports(3)
    command = [
        sys.executable,
        "-m",
        "server.edge",
        f"--tenants={tenants_path}",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--admin-port={admin}",
        f"--triton-http-port={triton.http_port}",
        f"--triton-grpc-port={triton.grpc_port}",
        f"--state-dir={state_dir}",
        *extra,
    ]
    return command, Endpoints("127.0.0.1", http, grpc, admin)
