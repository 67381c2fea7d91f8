"""The edge's spans: Envoy's own OpenTelemetry tracer, one server span per
request (`edge`, service `embedding-edge`), exported over OTLP/HTTP
(protobuf) to the collector the launcher's --otlp-endpoint names.

Which requests: one that carries a sampled W3C context (`traceparent`
with the sampled flag) is traced as a child of the caller's span; one
that carries an unsampled context is not; of the others, --trace-sampling
draws the share traced at random, each a new trace. Envoy's tracer starts
no span for a `traceparent` it cannot read, so a malformed one is served
untraced.

How: Envoy traces a request only where its own decision and the caller's
sampled flag agree, and its decision for a request without
`x-client-trace-id` is the random share. So an early header mutation,
which runs before the decision, sets `x-client-trace-id` to the request's
`traceparent` where there is one (and drops a client's own): such a
request is decided traced (client_sampling 100%), and the caller's flag
alone decides; the others get the random share.

Why an upstream filter (trace.lua) on the clusters to Triton: Envoy's
tracer sets a context on every request it forwards, sampled or not
(envoyproxy/envoy#38222), and Triton traces every request that carries a
context whatever its sampled flag (server/tracing.py); Triton 2.51 dies of
tracing at high rates (docs/operations.md, "Keep the traced rate low").
The filter runs after the tracer has set the context and removes an
unsampled one, so Triton traces exactly the requests the edge traced;
with the edge in front the launcher serves Triton's own share as 0. It
also bounds what a caller can make Triton trace: a client that sends a
sampled context with every request would otherwise choose the rate. Each
cluster to Triton (a tenant's requests over one protocol) passes on at
most TRITON_TRACED_PER_SECOND sampled contexts a second; beyond them,
Triton is sent none, and the request is served and traced at the edge
only.

The span's attributes beyond Envoy's own (method, URL, status, upstream
cluster, request id): the tenant (`embedding.tenant`, from auth.lua's
x-tenant), the model a request names and, for a tenant with a texts
quota, its texts (`embedding.model`, `embedding.texts`, which auth.lua
and body.lua put in the request's dynamic metadata).

Drops: Envoy exports from each worker every second, or as soon as 512
spans wait, holds at most MAX_CACHED_SPANS per worker, and bounds each
POST by EXPORT_TIMEOUT_S and the exports in flight by the collector
cluster's circuit breaker; a failed export's spans are lost, never
retried, and no request waits for one. Envoy counts the exports in the
collector cluster's stats; `python -m server.edge` logs how many failed
once per DROP_LOG_INTERVAL_S (server/edge/__main__.py).
"""

from __future__ import annotations

import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedding_catalog.trace_options import DEFAULT_SAMPLING, TRACES_PATH

SERVICE_NAME = "embedding-edge"
SPAN_NAME = "edge"
COLLECTOR_CLUSTER = "edge_otlp_collector"
# Where the Lua filters put what the span's attributes read.
METADATA_NAMESPACE = "edge"
TENANT_ATTRIBUTE = "embedding.tenant"
MODEL_ATTRIBUTE = "embedding.model"
TEXTS_ATTRIBUTE = "embedding.texts"
# As the gateway's exporter (clients/embedding_client/gateway/otlp.py).
FLUSH_INTERVAL_MS = 1000
FLUSH_SPANS = 512
MAX_CACHED_SPANS = 2048
EXPORT_TIMEOUT_S = 2
# Exports in flight to the collector at once; beyond it an export fails
# at once (counted as an overflow) rather than queueing.
MAX_EXPORTS_IN_FLIGHT = 8
DROP_LOG_INTERVAL_S = 10.0
# Per cluster to Triton, so per tenant and protocol. Triton 2.51 died
# within seconds tracing about 190 requests a second here, and not at about
# 100 (docs/operations.md, "Keep the traced rate low"); a tenant over both
# protocols reaches 20, and the default ratio at this machine's peak (about
# 1800 texts/s, 8 to a request) traces about 2. A caller asking for every
# request to be traced: perf/results/debian12-2core/traced_flood.md.
TRITON_TRACED_PER_SECOND = 10
LUA_TYPE = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
UPSTREAM_FILTER = (Path(__file__).resolve().parent / "trace.lua").read_text()


@dataclass(frozen=True)
class EdgeTracing:
    endpoint: str  # the collector's OTLP/HTTP base address (server/tracing.py)
    ratio: float = DEFAULT_SAMPLING

    @property
    def url(self) -> str:
        return self.endpoint + TRACES_PATH

    def describe(self) -> str:
        return (
            f"spans to {self.url} as {SERVICE_NAME}: requests with a sampled traceparent "
            f"and a share {self.ratio:g} of those without one"
        )


def connection_manager_tracing(tracing: EdgeTracing) -> dict[str, Any]:
    """The HTTP connection manager's `tracing`, for both public listeners."""
    return {
        # Percent. A request with a context is decided traced (the module's
        # docstring), and its sampled flag decides.
        "random_sampling": {"value": tracing.ratio * 100.0},
        "client_sampling": {"value": 100.0},
        "custom_tags": [
            {"tag": TENANT_ATTRIBUTE, "request_header": {"name": "x-tenant"}},
            _metadata_tag(MODEL_ATTRIBUTE, "model"),
            _metadata_tag(TEXTS_ATTRIBUTE, "texts"),
        ],
        "provider": {
            "name": "envoy.tracers.opentelemetry",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
                "http_service": {
                    "http_uri": {
                        "uri": tracing.url,
                        "cluster": COLLECTOR_CLUSTER,
                        "timeout": f"{EXPORT_TIMEOUT_S}s",
                    }
                },
                "service_name": SERVICE_NAME,
                "max_cache_size": MAX_CACHED_SPANS,
            },
        },
    }


def context_decides() -> dict[str, Any]:
    """The early header mutation that leaves the decision to a request's
    context, where it carries one: `x-client-trace-id` is its `traceparent`
    (an empty value is not added), never the client's own."""
    client_id = "x-client-trace-id"
    return {
        "name": "envoy.http.early_header_mutation.header_mutation",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.http.early_header_mutation."
            "header_mutation.v3.HeaderMutation",
            "mutations": [
                {"remove": client_id},
                {
                    "append": {
                        "header": {"key": client_id, "value": "%REQ(traceparent)%"},
                        "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
                    }
                },
            ],
        },
    }


def _metadata_tag(tag: str, key: str) -> dict[str, Any]:
    return {
        "tag": tag,
        "metadata": {
            "kind": {"request": {}},
            "metadata_key": {"key": METADATA_NAMESPACE, "path": [{"key": key}]},
        },
    }


def runtime() -> dict[str, int]:
    """The static runtime layer's keys of the tracer's export batches."""
    return {
        "tracing.opentelemetry.flush_interval_ms": FLUSH_INTERVAL_MS,
        "tracing.opentelemetry.min_flush_spans": FLUSH_SPANS,
    }


def collector_cluster(tracing: EdgeTracing) -> dict[str, Any]:
    """Where the spans go: the endpoint's host, by DNS (a service name in
    compose or Kubernetes), over TLS for https with the system's CAs."""
    parts = urllib.parse.urlsplit(tracing.endpoint)
    secure = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    cluster: dict[str, Any] = {
        "name": COLLECTOR_CLUSTER,
        "type": "STRICT_DNS",
        "dns_lookup_family": "V4_PREFERRED",
        "connect_timeout": f"{EXPORT_TIMEOUT_S}s",
        "load_assignment": {
            "cluster_name": COLLECTOR_CLUSTER,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {"socket_address": {"address": host, "port_value": port}}
                            }
                        }
                    ]
                }
            ],
        },
        "circuit_breakers": {
            "thresholds": [
                {
                    "max_requests": MAX_EXPORTS_IN_FLIGHT,
                    "max_pending_requests": MAX_EXPORTS_IN_FLIGHT,
                    "max_retries": 0,
                }
            ]
        },
    }
    if secure:
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/"
                "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "sni": host,
                "common_tls_context": {
                    "validation_context": {
                        "trusted_ca": {"filename": ssl.get_default_verify_paths().openssl_cafile},
                        "match_typed_subject_alt_names": [
                            {"san_type": "DNS", "matcher": {"exact": host}}
                        ],
                    }
                },
            },
        }
    return cluster


def upstream_filters(workers: int) -> list[dict[str, Any]]:
    """The HTTP filters of a cluster to Triton: trace.lua, then the codec.
    Each of Envoy's `workers` counts in a Lua state of its own, so each
    passes on its share of the contexts."""
    share = max(1, TRITON_TRACED_PER_SECOND // workers)
    return [
        {
            "name": "edge.trace",
            "typed_config": {
                "@type": LUA_TYPE,
                "default_source_code": {
                    "inline_string": f"local TRACED_PER_SECOND = {share}\n{UPSTREAM_FILTER}"
                },
            },
        },
        {
            "name": "envoy.filters.http.upstream_codec",
            "typed_config": {
                "@type": "type.googleapis.com/"
                "envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"
            },
        },
    ]


# The collector cluster's counts of exports, ended and succeeded.
EXPORTS_COMPLETED = f"cluster.{COLLECTOR_CLUSTER}.upstream_rq_completed"
EXPORTS_SUCCEEDED = f"cluster.{COLLECTOR_CLUSTER}.upstream_rq_2xx"


@dataclass(frozen=True)
class Exports:
    """The collector cluster's counts since Envoy started."""

    completed: int = 0
    succeeded: int = 0

    def failed_since(self, before: Exports) -> tuple[int, int]:
        """(failed, all) exports between `before` and these counts."""
        done = self.completed - before.completed
        return done - (self.succeeded - before.succeeded), done
