"""Every refusal of the edge, in the service's error grammar: one table
(REFUSALS) gives each its kind, which gives its HTTP status and gRPC code
(KINDS), and its message, `kind 'param': detail` as the models write theirs
(model_common/model_common/errors.py; tests/test_edge_refusals.py holds the
two equal). The Lua filters read it as a Lua table (`lua_table`, prepended
to each filter by server/edge/routes.py); Envoy's own refusals (the quotas,
the in-flight bound, a body or a path it will not take) are rewritten to it
by the listeners' local replies (server/edge/config.py).

Over HTTP a refusal's body is `{"error": MESSAGE, "error_type": KIND}`.
`error` holding the message is the shape of Triton's own HTTP errors, which
tritonclient reads (the client library then parses the kind and the
parameter from the message, embedding_client.errors), and these two members
are the gateway's TEI error shape; the gateway's OpenAI shape puts an object
under `error`, which tritonclient would take for the message. Over gRPC the
same MESSAGE is the grpc-message, with the kind's code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files

# The members of an HTTP refusal's JSON body.
MESSAGE_MEMBER = "error"
KIND_MEMBER = "error_type"
# Where a Lua filter's refusal names itself (dynamic metadata, key "name"):
# Envoy passes the Lua filters' answers through the listeners' local
# replies too, which must leave those as they are.
LUA_REFUSAL_METADATA = "edge.refusal"


@dataclass(frozen=True)
class Kind:
    http: int  # the HTTP status
    grpc: int  # the gRPC status code


# Each kind's status, as Triton answers its own errors of that class
# (INVALID_ARG: 400 / INVALID_ARGUMENT), from the service's declaration of
# its error kinds (row_formats.json), which the client library reads too.
KINDS = {
    kind["name"]: Kind(kind["http"], kind["grpc"])
    for kind in json.loads(
        files("model_common").joinpath("row_formats.json").read_text(encoding="utf-8")
    )["error_kinds"]
}


@dataclass(frozen=True)
class Refusal:
    kind: str  # a key of KINDS
    # What went wrong; each %s takes a word of the request (a model's name,
    # a count, why it could not be read), in order.
    detail: str
    parameter: str | None = None  # the request parameter it names, if any

    @property
    def http_status(self) -> int:
        return KINDS[self.kind].http

    @property
    def grpc_status(self) -> int:
        return KINDS[self.kind].grpc

    @property
    def prefix(self) -> str:
        named = f" '{self.parameter}'" if self.parameter is not None else ""
        return f"{self.kind}{named}: "

    def message(self, *words: str) -> str:
        return self.prefix + (self.detail % words if words else self.detail)

    def http_body(self, *words: str) -> dict[str, str]:
        return {MESSAGE_MEMBER: self.message(*words), KIND_MEMBER: self.kind}


REFUSALS = {
    # auth.lua: who is calling, and may they call this.
    "no_key": Refusal("unauthenticated", "send exactly one authorization: Bearer KEY header"),
    "unknown_key": Refusal("unauthenticated", "unknown key"),
    # A key there would end up in logs; Triton's API takes nothing in a query.
    "query_string": Refusal("invalid_input", "query strings are not accepted"),
    "not_offered": Refusal("permission_denied", "not offered at the edge"),
    "model_not_allowed": Refusal("permission_denied", "this key may not call model %s", "model"),
    "stage_not_callable": Refusal(
        "permission_denied",
        "this key may not call model %s, a stage of its models: it may read it, not call it",
        "model",
    ),
    # body.lua: what the request holds.
    "unreadable": Refusal("invalid_input", "%s"),
    "compressed": Refusal("invalid_input", "compressed requests are not accepted"),
    "priority": Refusal("invalid_parameter", "must be a whole number", "priority"),
    # More texts than the tenant's bucket holds could never pass: too large,
    # not "retry later".
    "too_many_texts": Refusal(
        "input_too_large",
        "%s texts in one request: more than this tenant's texts_per_second quota (%s); "
        "send fewer per request",
    ),
    # common.lua: a filter that failed refuses (fail closed); until the
    # routes are read every request is refused.
    "internal": Refusal("internal", "the edge failed to check this request; it was not passed on"),
    "not_configured": Refusal("unavailable", "the edge has no tenants in force yet"),
    # Envoy's own, rewritten by the listeners' local replies (config.py).
    "requests_quota": Refusal("quota_exceeded", "over this tenant's requests_per_second quota"),
    "texts_quota": Refusal("quota_exceeded", "over this tenant's texts_per_second quota"),
    "in_flight": Refusal("unavailable", "over this tenant's max_in_flight requests at Triton"),
    "body_too_large": Refusal("input_too_large", "the request is over the edge's %s MiB"),
    "bad_request": Refusal("invalid_input", "the edge cannot route this request (%s)"),
    "unreachable": Refusal("unavailable", "Triton did not answer the edge: %s"),
}


def refusal_message(name: str, *words: str) -> str:
    """The message of refusal `name` with the request's `words`."""
    return REFUSALS[name].message(*words)


def lua_table() -> str:
    """REFUSALS as Lua source, for common.lua's `refuse`: by name, the HTTP
    status, the gRPC code, the kind, the message's prefix and its detail
    (a string.format pattern); the JSON body's member names; where a
    refusal names itself."""

    def string(value: str) -> str:
        # json.dumps of an ASCII string is a valid Lua string literal.
        return json.dumps(value, ensure_ascii=True)

    entries = ",\n  ".join(
        f"[{string(name)}] = {{http = {r.http_status}, grpc = {string(str(r.grpc_status))}, "
        f"kind = {string(r.kind)}, prefix = {string(r.prefix)}, detail = {string(r.detail)}}}"
        for name, r in REFUSALS.items()
    )
    return (
        f"local REFUSALS = {{\n  {entries}\n}}\n"
        f"local ERROR_MEMBERS = {{message = {string(MESSAGE_MEMBER)}, "
        f"kind = {string(KIND_MEMBER)}}}\n"
        f"local REFUSAL_METADATA = {string(LUA_REFUSAL_METADATA)}\n"
    )
