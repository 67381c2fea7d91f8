"""The routes of both listeners (RDS, a file Envoy watches): the Lua
filters' tables and sources per virtual host, and one route per tenant with
its token buckets (server/edge/config.py says why these pieces)."""

from __future__ import annotations

import json
from typing import Any

from server.edge.config import (
    CLUSTER_HEADER,
    LUA_DIR,
    LUA_FILES,
    LUA_ROUTE_TYPE,
    RATE_FILTER,
    RATE_TYPE,
    RETRY_AFTER_S,
    ROUTES,
    SPAN_DECORATOR,
    TEXTS_FILTER,
    TEXTS_HEADER,
    UNBOUNDED_TOKENS,
)
from server.edge.refusals import lua_table
from server.edge.tracing import METADATA_NAMESPACE
from server.tenants import Tenant, Tenants


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
                "inline_string": tables
                + lua_table()
                + "".join((LUA_DIR / f).read_text() for f in files)
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
