"""Envoy's configuration for the edge: a static bootstrap (listeners, admin)
and the parts that follow the tenants file, read by Envoy from files it
watches (filesystem xDS): the routes (RDS: the Lua filters' tenant tables,
one route per tenant with its rate limit) and the clusters (CDS: one per
tenant and protocol, with its in-flight bound). A new tenants file replaces
those files; Envoy applies them without a restart or a dropped request.

Why these pieces:
- Keys are hashed (the file holds SHA-256 only), and Envoy's api_key_auth
  compares plaintext keys, so a Lua filter hashes the presented key and
  looks the tenant up (auth.lua), then names it in `x-tenant`.
- The tables live in per-virtual-host Lua configs (LuaPerRoute) in the
  routes, not in the listener: a routes update takes effect for the next
  request on every open connection, whereas a listener update drains
  connections, so a revoked key would keep working on a long-lived
  gRPC connection until it drained.
- One route per tenant (matched on `x-tenant`) carries that tenant's token
  buckets (local_ratelimit per route) and sends to that tenant's cluster for
  the request's protocol (named by auth.lua in `x-edge-cluster`), whose
  circuit breaker bounds its requests at Triton. Both listeners use the one
  route configuration, so a tenant's rate holds for HTTP and gRPC together;
  the in-flight bound holds per protocol (HTTP/1.1 and HTTP/2 upstreams are
  separate clusters). Per-tenant clusters also give per-tenant Envoy stats:
  requests, latency histograms, overflows.
- Texts per second: a second local_ratelimit, after body.lua, which counts a
  request's texts (it has read the body) into `x-edge-texts`; the route's
  rate limit descriptor takes that many tokens from the tenant's texts
  bucket (`hits_addend`). Envoy's own bucket holds across worker threads
  (--concurrency), which a count kept in Lua would not: each worker runs
  its own Lua state. A request is refused whole or passes whole; one with
  more texts than the bucket holds could never pass, so body.lua refuses it
  as too large (400 / INVALID_ARGUMENT) instead of answering 429 forever.
- Every model's statistics (perf_analyzer asks for them to break an
  ensemble's time down by stage) are cut by stats.lua, on the answer, to
  the models the key may read: Triton has no request for a list of models.
- With traces, Envoy's own tracer on both listeners, and an upstream filter
  on every cluster to Triton that passes on only the contexts it traced
  (server/edge/tracing.py says why).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.edge.tracing import (
    METADATA_NAMESPACE,
    SPAN_NAME,
    EdgeTracing,
    collector_cluster,
    connection_manager_tracing,
    context_decides,
    runtime,
    upstream_filters,
)
from server.tenants import Tenant, Tenants

LUA_DIR = Path(__file__).resolve().parent
HTTP_LISTENER = "http"
GRPC_LISTENER = "grpc"
AUTH_FILTER = "edge.auth"
BODY_FILTER = "edge.body"
STATS_FILTER = "edge.stats"
RATE_FILTER = "edge.ratelimit"
TEXTS_FILTER = "edge.texts"
# Set by body.lua: the texts in a request, which the texts bucket takes.
TEXTS_HEADER = "x-edge-texts"
# One route configuration for both listeners: Envoy shares a route
# configuration between listeners that name the same one, so each tenant's
# token bucket (per route) holds for HTTP and gRPC together.
ROUTES = "edge"
ROUTES_FILE = "routes.json"
# Set by auth.lua: the cluster a request goes to (its tenant's, for its protocol).
CLUSTER_HEADER = "x-edge-cluster"
CLUSTERS_FILE = "clusters.json"
BUFFER_LIMIT_BYTES = 16 * 1024 * 1024
ROUTER_FILTER = {
    "name": "envoy.filters.http.router",
    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
}
# What the stats listener serves, from the admin interface (a static
# cluster: the tenants' clusters come and go with the file).
STATS_PATH = "/stats/prometheus"
ADMIN_CLUSTER = "edge_admin"
# Seconds a rate-limited client is told to wait, and one Triton refused for
# a full queue (auth.lua): the buckets refill every second, and a queue
# drains in about that.
RETRY_AFTER_S = 1
# What a client reads over either quota (HTTP body, gRPC message); only a
# request body.lua counted carries TEXTS_HEADER.
TEXTS_QUOTA_MESSAGE = "over this tenant's texts_per_second quota"
REQUESTS_QUOTA_MESSAGE = "over this tenant's requests_per_second quota"
# The name of the edge's span, when it traces; Envoy sends it nowhere.
SPAN_DECORATOR = {"operation": SPAN_NAME, "propagate": False}
# local_ratelimit's largest bucket (uint32 tokens).
UNBOUNDED_TOKENS = 2**32 - 1
LUA_TYPE = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
LUA_ROUTE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute"
RATE_TYPE = "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit"
HCM_TYPE = (
    "type.googleapis.com/"
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)
# Each Lua filter's source, after the tables: what the filters share, the
# readers of what they buffer (wire.lua), then the filter's own.
LUA_FILES = {
    AUTH_FILTER: ("common.lua", "auth.lua"),
    BODY_FILTER: ("common.lua", "wire.lua", "body.lua"),
    STATS_FILTER: ("common.lua", "wire.lua", "stats.lua"),
}
# Until the routes file is read, and on any route without the tables: refuse.
DENY_ALL = """
function envoy_on_request(handle)
  handle:respond({[":status"] = "503"}, "edge not configured")
end
"""


@dataclass(frozen=True)
class EdgePorts:
    host: str  # where clients reach the edge
    http: int
    grpc: int
    admin: int  # Envoy's admin interface, on loopback only
    triton_host: str  # Triton's internal (loopback) ports
    triton_http: int
    triton_grpc: int
    # Where Prometheus reads the per-tenant stats (/stats/prometheus) on
    # `host`: the admin interface can stop Envoy, so it stays on loopback and
    # this listener passes on that one path. None: no such listener.
    stats: int | None = None


def bootstrap(
    ports: EdgePorts, config_dir: Path, tracing: EdgeTracing | None = None
) -> dict[str, Any]:
    """The static part: listeners, admin, and where the dynamic parts are;
    with `tracing`, the tracer and its collector (server/edge/tracing.py)."""
    static: dict[str, Any] = {
        "listeners": [
            _listener(HTTP_LISTENER, ports.host, ports.http, config_dir, tracing),
            _listener(GRPC_LISTENER, ports.host, ports.grpc, config_dir, tracing),
        ],
        "clusters": [],
    }
    if ports.stats is not None:
        static["listeners"].append(_stats_listener(ports.host, ports.stats))
        static["clusters"].append(_admin_cluster(ports.admin))
    if tracing is not None:
        static["clusters"].append(collector_cluster(tracing))
    return {
        "node": {"id": "edge", "cluster": "edge"},
        "admin": {"address": _address("127.0.0.1", ports.admin)},
        "dynamic_resources": {"cds_config": _file_source(config_dir, CLUSTERS_FILE)},
        "static_resources": static,
        # No overload manager: the in-flight bounds are per tenant (clusters).
        "layered_runtime": {
            "layers": [{"name": "static", "static_layer": runtime() if tracing is not None else {}}]
        },
    }


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _file_source(config_dir: Path, name: str) -> dict[str, Any]:
    # Envoy reloads the file when a file is moved into the directory: the
    # edge writes a temporary file and renames it, so Envoy never reads half.
    return {
        "path_config_source": {
            "path": str(config_dir / name),
            "watched_directory": {"path": str(config_dir)},
        },
        "resource_api_version": "V3",
    }


def listener_stat_prefix(name: str) -> str:
    """Where a public listener's stats are: http.<this>.*"""
    return f"edge_{name}"


def _listener(
    name: str, host: str, port: int, config_dir: Path, tracing: EdgeTracing | None
) -> dict[str, Any]:
    manager: dict[str, Any] = {
        "@type": HCM_TYPE,
        "stat_prefix": listener_stat_prefix(name),
        "codec_type": "AUTO",
        # A path is checked as Triton will read it: no `..`, no `//`, no
        # escaped slashes slipping past the model check.
        "normalize_path": True,
        "merge_slashes": True,
        "path_with_escaped_slashes_action": "REJECT_REQUEST",
        "rds": {
            "route_config_name": ROUTES,
            "config_source": _file_source(config_dir, ROUTES_FILE),
        },
        "local_reply_config": {"mappers": [_quota_message(True), _quota_message(False)]},
        "http_filters": [
            _lua(AUTH_FILTER),
            # Both enabled per route, with each tenant's buckets.
            {"name": RATE_FILTER, "typed_config": {"@type": RATE_TYPE, "stat_prefix": "edge"}},
            _lua(BODY_FILTER),
            _lua(STATS_FILTER),
            {
                "name": TEXTS_FILTER,
                "typed_config": {"@type": RATE_TYPE, "stat_prefix": "edge_texts"},
            },
            ROUTER_FILTER,
        ],
    }
    if tracing is not None:
        manager["tracing"] = connection_manager_tracing(tracing)
        manager["early_header_mutation_extensions"] = [context_decides()]
    return {
        "name": name,
        "address": _address(host, port),
        # The body filter buffers a whole request; the largest Triton takes
        # (64 texts of 32 KiB, JSON-escaped over HTTP) must fit.
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT_BYTES,
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": manager,
                    }
                ]
            }
        ],
    }


def _quota_message(texts: bool) -> dict[str, Any]:
    """Names the quota in a 429 of the rate limit filters, whose own text is
    "local_rate_limited" for both. Envoy puts the body of a gRPC local reply
    in grpc-message."""
    counted = {"name": TEXTS_HEADER, "present_match": True}
    too_many = {
        "status_code_filter": {
            "comparison": {
                "op": "EQ",
                "value": {"default_value": 429, "runtime_key": "edge_quota_status"},
            }
        }
    }
    return {
        "filter": (
            {"and_filter": {"filters": [too_many, {"header_filter": {"header": counted}}]}}
            if texts
            else too_many
        ),
        "body": {"inline_string": TEXTS_QUOTA_MESSAGE if texts else REQUESTS_QUOTA_MESSAGE},
    }


def _stats_listener(host: str, port: int) -> dict[str, Any]:
    """/stats/prometheus of the admin interface, and nothing else of it."""
    manager = {
        "@type": HCM_TYPE,
        "stat_prefix": "edge_stats",
        "codec_type": "AUTO",
        "route_config": {
            "name": "stats",
            "virtual_hosts": [
                {
                    "name": "stats",
                    "domains": ["*"],
                    "routes": [
                        {
                            "match": {"path": STATS_PATH},
                            "route": {"cluster": ADMIN_CLUSTER},
                        }
                    ],
                }
            ],
        },
        "http_filters": [ROUTER_FILTER],
    }
    return {
        "name": "stats",
        "address": _address(host, port),
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": manager,
                    }
                ]
            }
        ],
    }


def _admin_cluster(port: int) -> dict[str, Any]:
    return {
        "name": ADMIN_CLUSTER,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": ADMIN_CLUSTER,
            "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": _address("127.0.0.1", port)}}]}
            ],
        },
    }


def _lua(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "typed_config": {"@type": LUA_TYPE, "default_source_code": {"inline_string": DENY_ALL}},
    }


def lua_tables(tenants: Tenants, traced: bool = False) -> str:
    """The tenant tables the Lua filters read, as Lua source; `traced`:
    where the edge's span reads what they name (nil: nothing to name)."""

    def string(value: str) -> str:
        # json.dumps of an ASCII string is a valid Lua string literal; the
        # names and hashes are plain ASCII (server/tenants.py).
        return json.dumps(value)

    hashes = ", ".join(
        f"[{string(digest)}] = {string(name)}" for digest, name in sorted(tenants.by_hash().items())
    )
    models = ", ".join(
        f"[{string(t.name)}] = {{"
        + ", ".join(f"[{string(m)}] = {string(i)}" for m, i in t.triton_models().items())
        + "}"
        for t in tenants.tenants
    )
    # Sets: a stage is read, never called, so it has no text input.
    stages = ", ".join(
        f"[{string(t.name)}] = {{" + ", ".join(f"[{string(s)}] = true" for s in t.stages) + "}"
        for t in tenants.tenants
    )
    priority = ", ".join(f"[{string(t.name)}] = {t.triton_priority}" for t in tenants.tenants)
    texts = ", ".join(
        f"[{string(t.name)}] = {t.texts_per_second}"
        for t in tenants.tenants
        if t.texts_per_second is not None
    )
    return (
        f"local TENANTS = {{{hashes}}}\n"
        f"local MODELS = {{{models}}}\n"
        f"local STAGES = {{{stages}}}\n"
        f"local PRIORITY = {{{priority}}}\n"
        f"local TEXTS_PER_SECOND = {{{texts}}}\n"
        f"local RETRY_AFTER_S = {RETRY_AFTER_S}\n"
        f"local SPAN_METADATA = {string(METADATA_NAMESPACE) if traced else 'nil'}\n"
    )


def routes(tenants: Tenants, traced: bool = False) -> dict[str, Any]:
    """The RouteConfiguration of both listeners."""
    # The cluster is the tenant's for the request's protocol (auth.lua
    # names it), so one route, one token bucket, per tenant.
    tables = lua_tables(tenants, traced)
    lua = {
        source: {
            "@type": LUA_ROUTE_TYPE,
            "source_code": {
                "inline_string": tables + "".join((LUA_DIR / f).read_text() for f in files)
            },
        }
        for source, files in LUA_FILES.items()
    }
    tenant_routes = [
        {
            "name": f"tenant-{t.name}",
            "match": {
                "prefix": "/",
                "headers": [{"name": "x-tenant", "string_match": {"exact": t.name}}],
            },
            # No route timeout: Triton's queue deadlines (up to 30 s for
            # bulk) and the client's own deadline bound a request.
            "route": {"cluster_header": CLUSTER_HEADER, "timeout": "0s"},
            "request_headers_to_remove": [CLUSTER_HEADER, TEXTS_HEADER],
            "decorator": SPAN_DECORATOR,
            "typed_per_filter_config": {
                RATE_FILTER: _bucket(t, t.requests_per_second),
                **({} if t.texts_per_second is None else {TEXTS_FILTER: _texts_bucket(t)}),
            },
        }
        for t in tenants.tenants
    ]
    return {
        "@type": "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
        "name": ROUTES,
        "virtual_hosts": [
            {
                "name": "edge",
                "domains": ["*"],
                "typed_per_filter_config": lua,
                "routes": [
                    *tenant_routes,
                    # No tenant: only what auth.lua lets through without a key.
                    {
                        "name": "open",
                        "match": {"prefix": "/"},
                        "route": {"cluster_header": CLUSTER_HEADER},
                        "request_headers_to_remove": [CLUSTER_HEADER],
                        "decorator": SPAN_DECORATOR,
                    },
                ],
            }
        ],
    }


def _token_bucket(per_second: int) -> dict[str, Any]:
    return {"max_tokens": per_second, "tokens_per_fill": per_second, "fill_interval": "1s"}


def _bucket(tenant: Tenant, per_second: int, stat_suffix: str = "") -> dict[str, Any]:
    always = {"default_value": {"numerator": 100, "denominator": "HUNDRED"}}
    return {
        "@type": RATE_TYPE,
        "stat_prefix": f"tenant_{tenant.name}{stat_suffix}",
        "token_bucket": _token_bucket(per_second),
        "filter_enabled": {**always, "runtime_key": "edge_ratelimit_enabled"},
        "filter_enforced": {**always, "runtime_key": "edge_ratelimit_enforced"},
        "response_headers_to_add": [
            {
                "header": {"key": "retry-after", "value": str(RETRY_AFTER_S)},
                "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
            }
        ],
        "rate_limited_as_resource_exhausted": True,
    }


def _texts_bucket(tenant: Tenant) -> dict[str, Any]:
    """Each request takes as many tokens as body.lua counted texts in it;
    a request it did not count (metadata, readiness: no TEXTS_HEADER) yields
    no descriptor and falls to the filter's default bucket, which is made
    never to run dry: the requests bucket already counts those."""
    assert tenant.texts_per_second is not None
    counted = {
        "descriptor_value": "texts",
        "headers": [{"name": TEXTS_HEADER, "present_match": True}],
    }
    return {
        **_bucket(tenant, UNBOUNDED_TOKENS, "_texts"),
        "descriptors": [
            {
                "entries": [{"key": "header_match", "value": counted["descriptor_value"]}],
                "token_bucket": _token_bucket(tenant.texts_per_second),
            }
        ],
        "rate_limits": [
            {
                "actions": [{"header_value_match": counted}],
                "hits_addend": {"format": f"%REQ({TEXTS_HEADER})%"},
            }
        ],
        # A counted request takes from the texts bucket only.
        "always_consume_default_token_bucket": False,
    }


def cluster_name(tenant: Tenant, protocol: str) -> str:
    return f"tenant-{tenant.name}-{protocol}"


def clusters(
    tenants: Tenants, ports: EdgePorts, traced_by_workers: int | None = None
) -> list[dict[str, Any]]:
    """One cluster per tenant and protocol, all to the same Triton; when the
    edge traces (with `traced_by_workers` Envoy workers), each with the
    upstream filter of server/edge/tracing.py."""
    result = []
    for protocol in ("http", "grpc"):
        result.append(_cluster(f"open-{protocol}", protocol, ports, None, traced_by_workers))
        for tenant in tenants.tenants:
            result.append(
                _cluster(
                    cluster_name(tenant, protocol),
                    protocol,
                    ports,
                    tenant.max_in_flight,
                    traced_by_workers,
                )
            )
    return result


def _cluster(
    name: str,
    protocol: str,
    ports: EdgePorts,
    in_flight: int | None,
    traced_by_workers: int | None,
) -> dict[str, Any]:
    port = ports.triton_http if protocol == "http" else ports.triton_grpc
    cluster: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
        "name": name,
        "type": "STATIC",
        "connect_timeout": "2s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": _address(ports.triton_host, port)}}]}
            ],
        },
    }
    options: dict[str, Any] = {}
    if protocol == "grpc":
        options["explicit_http_config"] = {"http2_protocol_options": {}}
    if traced_by_workers is not None:
        options.setdefault("explicit_http_config", {"http_protocol_options": {}})
        options["http_filters"] = upstream_filters(traced_by_workers)
    if options:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                **options,
            }
        }
    if in_flight is not None:
        # Beyond max_in_flight requests at Triton, the next is refused at
        # once (503 / UNAVAILABLE, x-envoy-overloaded) instead of queueing
        # in Envoy; over HTTP/1.1 each request needs its own connection.
        cluster["circuit_breakers"] = {
            "thresholds": [
                {
                    "max_requests": in_flight,
                    "max_connections": in_flight,
                    "max_pending_requests": in_flight,
                    "max_retries": 0,
                }
            ]
        }
    return cluster


def discovery_response(
    resources: list[dict[str, Any]], version: str, type_url: str
) -> dict[str, Any]:
    return {"version_info": version, "type_url": type_url, "resources": resources}


CLUSTER_TYPE = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ROUTE_TYPE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"


def dynamic_files(
    tenants: Tenants, ports: EdgePorts, traced_by_workers: int | None = None
) -> dict[str, tuple[str, str]]:
    """File name -> (version, content) of every file Envoy watches, for
    these tenants; `traced_by_workers`: Envoy's workers where the edge
    traces, None where it does not. Each version is its own resources'
    digest: Envoy keeps a version only where the resources changed, so the
    edge can tell which version Envoy serves."""
    traced = traced_by_workers is not None
    resources = {
        CLUSTERS_FILE: (clusters(tenants, ports, traced_by_workers), CLUSTER_TYPE),
        ROUTES_FILE: ([routes(tenants, traced)], ROUTE_TYPE),
    }
    files = {}
    for name, (items, type_url) in resources.items():
        version = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:16]
        content = json.dumps(discovery_response(items, version, type_url), indent=1)
        files[name] = (version, content)
    return files
