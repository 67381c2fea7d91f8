"""Envoy's configuration for the edge: a static bootstrap (listeners, admin)
and the parts that follow the tenants file, read by Envoy from files it
watches (filesystem xDS): the routes (RDS: the Lua filters' tenant tables,
one route per tenant with its rate limit) and the clusters (CDS: one per
tenant and protocol, with its in-flight bound). A new tenants file replaces
those files; Envoy applies them without a restart or a dropped request.
This module holds the static bootstrap and the names the parts share; the
routes are server/edge/routes.py's, the clusters server/edge/clusters.py's,
the watched files server/edge/xds.py's, and every refusal's status and
message server/edge/refusals.py's.

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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.edge.refusals import LUA_REFUSAL_METADATA, REFUSALS, Refusal, lua_table
from server.edge.tracing import (
    SPAN_NAME,
    EdgeTracing,
    collector_cluster,
    connection_manager_tracing,
    context_decides,
    runtime,
)

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
DENY_ALL = (
    lua_table()
    + (LUA_DIR / "common.lua").read_text()
    + 'envoy_on_request = function(handle) refuse(handle, "not_configured") end\n'
)


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
        "admin": {"address": address("127.0.0.1", ports.admin)},
        "dynamic_resources": {"cds_config": _file_source(config_dir, CLUSTERS_FILE)},
        "static_resources": static,
        # No overload manager: the in-flight bounds are per tenant (clusters).
        "layered_runtime": {
            "layers": [{"name": "static", "static_layer": runtime() if tracing is not None else {}}]
        },
    }


def address(host: str, port: int) -> dict[str, Any]:
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
        "local_reply_config": {"mappers": local_replies()},
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
        "address": address(host, port),
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


def _status_is(op: str, status: int) -> dict[str, Any]:
    comparison = {"op": op, "value": {"default_value": status, "runtime_key": "edge_reply_status"}}
    return {"status_code_filter": {"comparison": comparison}}


def _all_of(*filters: dict[str, Any]) -> dict[str, Any]:
    return {"and_filter": {"filters": list(filters)}}


# Each of Envoy's own refusals: when a local reply is it, and the words its
# message takes. The first that matches is the one.
ENVOY_REFUSALS: tuple[tuple[str, dict[str, Any], tuple[str, ...]], ...] = (
    # Only a request body.lua counted carries TEXTS_HEADER; the rate limit
    # filters' own text is "local_rate_limited" for both quotas.
    (
        "texts_quota",
        _all_of(
            _status_is("EQ", 429),
            {"header_filter": {"header": {"name": TEXTS_HEADER, "present_match": True}}},
        ),
        (),
    ),
    ("requests_quota", _status_is("EQ", 429), ()),
    # A tenant's cluster's circuit breaker (its max_in_flight): upstream overflow.
    ("in_flight", {"response_flag_filter": {"flags": ["UO"]}}, ()),
    # body.lua reads a whole request; one over the buffer is refused unread.
    ("body_too_large", _status_is("EQ", 413), (str(BUFFER_LIMIT_BYTES // 2**20),)),
    # A path the listener refuses as Triton would not read it, or a request
    # it cannot parse.
    ("bad_request", _status_is("EQ", 400), ("%RESPONSE_CODE_DETAILS%",)),
    ("unreachable", _status_is("GE", 500), ("%LOCAL_REPLY_BODY%",)),
)


def local_replies() -> list[dict[str, Any]]:
    """Envoy's own refusals in the edge's error grammar (refusals.py): over
    gRPC the message and the kind's code, over HTTP the kind's status and
    the JSON body; gRPC's first, as an HTTP request may lack a content-type.
    The Lua filters' refusals, in the grammar already, pass as they are."""
    grpc = {
        "header_filter": {
            "header": {"name": "content-type", "string_match": {"prefix": "application/grpc"}}
        }
    }
    lua = {
        "metadata_filter": {
            "matcher": {
                "filter": LUA_REFUSAL_METADATA,
                "path": [{"key": "name"}],
                "value": {"present_match": True},
            },
            "match_if_key_not_found": False,
        }
    }
    # A Lua filter's refusal: matched first, rewritten not at all.
    mappers: list[dict[str, Any]] = [{"filter": lua}]
    for name, when, words in ENVOY_REFUSALS:
        mappers.append(_grpc_reply(REFUSALS[name], _all_of(when, grpc), words))
    for name, when, words in ENVOY_REFUSALS:
        mappers.append(_http_reply(REFUSALS[name], when, words))
    return mappers


def _grpc_reply(refusal: Refusal, when: dict[str, Any], words: tuple[str, ...]) -> dict[str, Any]:
    """Envoy puts the body of a gRPC local reply in grpc-message, and keeps
    a grpc-status the reply already has."""
    grpc_status = {"key": "grpc-status", "value": str(refusal.grpc_status)}
    return {
        "filter": when,
        "headers_to_add": [{"header": grpc_status, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}],
        "body_format_override": {"text_format_source": {"inline_string": refusal.message(*words)}},
    }


def _http_reply(refusal: Refusal, when: dict[str, Any], words: tuple[str, ...]) -> dict[str, Any]:
    return {
        "filter": when,
        "status_code": refusal.http_status,
        "body_format_override": {"json_format": refusal.http_body(*words)},
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
        "address": address(host, port),
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
                {"lb_endpoints": [{"endpoint": {"address": address("127.0.0.1", port)}}]}
            ],
        },
    }


def _lua(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "typed_config": {"@type": LUA_TYPE, "default_source_code": {"inline_string": DENY_ALL}},
    }
