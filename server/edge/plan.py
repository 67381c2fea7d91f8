"""What `python -m server.edge` runs, decided before anything starts: the
Envoy process (its command line, its ports, its files: the bootstrap, the
watched config folder, its log), the tenants file it enforces and the
catalog's stages. Built from the arguments by pure functions (tested
without starting anything, tests/test_edge_plan.py); server/edge/supervise.py
runs a plan, and server/edge/__init__.py's Edge runs its Envoy.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.edge.config import EdgePorts, bootstrap
from server.edge.tracing import EdgeTracing
from server.tenants import CatalogStages


@dataclass(frozen=True)
class EnvoyPlan:
    """One Envoy in front of Triton."""

    ports: EdgePorts
    state_dir: Path  # the bootstrap, the watched config folder, the log
    envoy: Path  # the binary
    concurrency: int = 1  # worker threads
    tracing: EdgeTracing | None = None

    @property
    def config_dir(self) -> Path:
        return self.state_dir / "xds"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "envoy.log"

    @property
    def bootstrap_path(self) -> Path:
        return self.state_dir / "bootstrap.json"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.admin}"

    def bootstrap(self) -> dict[str, Any]:
        """What bootstrap_path holds (server/edge/config.py)."""
        return bootstrap(self.ports, self.config_dir, self.tracing)

    def command(self) -> list[str]:
        return [
            str(self.envoy),
            "--config-path",
            str(self.bootstrap_path),
            "--concurrency",
            str(self.concurrency),
            # The launcher supervises the edge: one Envoy, restarted whole.
            "--disable-hot-restart",
            # Listeners never change at run time; on stop, every connection
            # is told to go away at once (GOAWAY / Connection: close).
            "--drain-strategy",
            "immediate",
            "--log-level",
            "warn",
        ]


@dataclass(frozen=True)
class EdgePlan:
    envoy: EnvoyPlan
    tenants: Path  # the tenants file, watched for changes
    # The served catalog's stages by model (a tenant may read its models'),
    # None: its models' entry points only.
    stages: CatalogStages | None


def edge_plan(args: argparse.Namespace, envoy: Path, stages: CatalogStages | None) -> EdgePlan:
    """The plan for `python -m server.edge`'s arguments, running the Envoy
    binary `envoy`."""
    ports = EdgePorts(
        args.host,
        args.http_port,
        args.grpc_port,
        args.admin_port,
        args.triton_host,
        args.triton_http_port,
        args.triton_grpc_port,
        args.stats_port,
    )
    tracing = EdgeTracing(args.otlp_endpoint, args.trace_sampling) if args.otlp_endpoint else None
    envoy_plan = EnvoyPlan(ports, args.state_dir, envoy, args.concurrency, tracing)
    return EdgePlan(envoy_plan, args.tenants, stages)
