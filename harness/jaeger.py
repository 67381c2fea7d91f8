"""Jaeger (build/tools/bin/jaeger, built by scripts/install_jaeger.sh) as a
child process on free loopback ports, for the tracing tests: an OTLP
receiver and an in-memory trace store, read back through Jaeger's query
API (/api/traces)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.ports import StartError, answers_ok, free_loopback_ports, stop, wait_until_ready
from server.paths import REPO_ROOT

JAEGER = REPO_ROOT / "build" / "tools" / "bin" / "jaeger"
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
STORAGE = "memstore"


class JaegerStartError(StartError):
    pass


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    # The span it is a child of (CHILD_OF), in this trace or the caller's.
    parent_id: str | None
    name: str
    service: str
    start_us: int
    duration_us: int
    tags: dict[str, Any]
    # Span events (Jaeger's logs): (name, microseconds since the epoch).
    events: tuple[tuple[str, int], ...]

    @property
    def end_us(self) -> int:
        return self.start_us + self.duration_us

    def event_us(self, name: str) -> int:
        """When the one event `name` happened."""
        (when,) = [us for event, us in self.events if event == name]
        return when


@dataclass(frozen=True)
class Trace:
    trace_id: str
    spans: tuple[Span, ...]
    service_names: frozenset[str]

    def named(self, name: str) -> list[Span]:
        return [span for span in self.spans if span.name == name]

    def children(self, parent: Span) -> list[Span]:
        return [span for span in self.spans if span.parent_id == parent.span_id]


def _span(raw: dict[str, Any], services: dict[str, str]) -> Span:
    parents = [ref["spanID"] for ref in raw.get("references", []) if ref["refType"] == "CHILD_OF"]
    events = []
    for log in raw.get("logs", []):
        names = [field["value"] for field in log["fields"] if field["key"] == "event"]
        events.extend((name, int(log["timestamp"])) for name in names)
    return Span(
        trace_id=raw["traceID"],
        span_id=raw["spanID"],
        parent_id=parents[0] if parents else None,
        name=raw["operationName"],
        service=services[raw["processID"]],
        start_us=int(raw["startTime"]),
        duration_us=int(raw["duration"]),
        tags={tag["key"]: tag["value"] for tag in raw.get("tags", [])},
        events=tuple(sorted(events, key=lambda event: event[1])),
    )


def _trace(raw: dict[str, Any]) -> Trace:
    services = {pid: process["serviceName"] for pid, process in raw["processes"].items()}
    spans = tuple(_span(span, services) for span in raw["spans"])
    return Trace(raw["traceID"], spans, frozenset(services.values()))


@dataclass(frozen=True)
class RunningJaeger:
    otlp_http_port: int
    query_port: int
    log_path: Path

    @property
    def otlp_endpoint(self) -> str:
        """The OTLP/HTTP base address, as --otlp-endpoint takes it."""
        return f"http://127.0.0.1:{self.otlp_http_port}"

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.query_port}"

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(self.query_url + path, timeout=10) as reply:
                body: dict[str, Any] = json.load(reply)
                return body
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise

    def trace(self, trace_id: str) -> Trace | None:
        """The trace stored under `trace_id` (32 hex digits), or None."""
        body = self._get(f"/api/traces/{trace_id}")
        if body is None or not body.get("data"):
            return None
        (raw,) = body["data"]
        return _trace(raw)

    def find_traces(self, service: str, tags: dict[str, str], limit: int = 100) -> list[Trace]:
        """The traces of `service` with a span that has all of `tags`, at
        most `limit` of them."""
        query = urllib.parse.urlencode(
            {"service": service, "tags": json.dumps(tags), "lookback": "1h", "limit": str(limit)}
        )
        body = self._get(f"/api/traces?{query}")
        return [] if body is None else [_trace(raw) for raw in body.get("data") or []]

    def wait_for(
        self, fetch: Callable[[], Trace | None], done: Callable[[Trace], bool], timeout_s: float
    ) -> Trace:
        """The trace `fetch` returns once `done` holds for it: a trace's
        spans arrive in batches (a server exports every few seconds)."""
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            last = fetch()
            if last is not None and done(last):
                return last
            time.sleep(0.5)
        raise AssertionError(f"no complete trace in {timeout_s} s; last seen: {last}")


def jaeger_config(otlp_grpc: int, otlp_http: int, query_http: int, query_grpc: int) -> str:
    """Jaeger v2's all-in-one (cmd/jaeger/internal/all-in-one.yaml) cut to
    OTLP in, memory, query out, every port on loopback and given: the
    defaults (4317, 4318, 16686, the collector's own metrics on 8888) would
    collide with another Jaeger on the machine. JSON is YAML."""
    loopback = "127.0.0.1:{}".format
    config = {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {
                "resource": {"service.name": "jaeger"},
                "metrics": {"level": "none"},
                "logs": {"level": "info"},
            },
        },
        "extensions": {
            "jaeger_query": {
                "storage": {"traces": STORAGE},
                # On by default: the query service would trace itself to
                # localhost:4317, whoever listens there.
                "enable_tracing": False,
                "http": {"endpoint": loopback(query_http)},
                "grpc": {"endpoint": loopback(query_grpc)},
            },
            "jaeger_storage": {"backends": {STORAGE: {"memory": {"max_traces": 100000}}}},
        },
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": loopback(otlp_grpc)},
                    "http": {"endpoint": loopback(otlp_http)},
                }
            }
        },
        # Stored within 200 ms of arriving (the batch processor's default
        # timeout, said here because a test waits on it).
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": STORAGE}},
    }
    return json.dumps(config, indent=1)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def running_jaeger(workdir: Path) -> Iterator[RunningJaeger]:
    """Jaeger on free loopback ports, its config and log in `workdir`;
    stopped on exit."""
    if not JAEGER.exists():
        raise JaegerStartError(f"{JAEGER} is missing; run scripts/install_jaeger.sh")
    workdir.mkdir(parents=True, exist_ok=True)
    otlp_grpc, otlp_http, query_http, query_grpc = free_loopback_ports(4)
    config = workdir / "jaeger.yaml"
    config.write_text(jaeger_config(otlp_grpc, otlp_http, query_http, query_grpc))
    log_path = workdir / "jaeger.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(JAEGER), f"--config={config}"], stdout=log, stderr=subprocess.STDOUT
        )
    running = RunningJaeger(otlp_http, query_http, log_path)
    try:
        wait_until_ready(
            lambda: answers_ok(f"{running.query_url}/api/services") and _accepts(otlp_http),
            process,
            log_path,
            what="jaeger",
            timeout_s=STARTUP_TIMEOUT_S,
            interval_s=0.25,
            error=JaegerStartError,
        )
        yield running
    finally:
        stop(process, STOP_TIMEOUT_S)
