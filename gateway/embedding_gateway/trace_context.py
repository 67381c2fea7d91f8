"""A caller's W3C trace context (traceparent, tracestate), read from its
request's headers. Without --otlp-endpoint the gateway passes it on to
Triton unchanged with each request it sends for the caller, so Triton's
spans join the caller's trace, and answers its trace id in TRACE_ID_HEADER;
with it, the gateway's own spans sit between the two (tracing.py).

A traceparent the W3C grammar refuses is no context: it is not passed on
(Triton would ignore it), and a traced request gets a new trace instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from embedding_client.base import TRACE_HEADERS

TRACEPARENT, TRACESTATE = TRACE_HEADERS
TRACE_ID_HEADER = "x-trace-id"
# version-traceid-parentid-flags, lowercase hex (W3C Trace Context, level 1);
# a later version may append fields, version 00 may not.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
# The W3C limit on tracestate: 32 members of at most 256 characters each.
MAX_TRACESTATE_CHARS = 32 * 257


@dataclass(frozen=True)
class TraceContext:
    traceparent: str
    tracestate: str | None = None

    @property
    def trace_id(self) -> str:
        return self.traceparent.split("-")[1]

    @property
    def span_id(self) -> str:
        """The caller's span, parent of the gateway's route span."""
        return self.traceparent.split("-")[2]

    def headers(self) -> dict[str, str]:
        """What Triton is sent: the caller's headers, unchanged."""
        headers = {TRACEPARENT: self.traceparent}
        if self.tracestate:
            headers[TRACESTATE] = self.tracestate
        return headers


def read_trace_context(headers: Mapping[str, str]) -> TraceContext | None:
    """The caller's context, or None where it sent none or none valid."""
    traceparent = (headers.get(TRACEPARENT) or "").strip()
    match = _TRACEPARENT.fullmatch(traceparent)
    if match is None:
        return None
    version, trace_id, span_id, _, rest = match.groups()
    if (
        version == "ff"
        or (version == "00" and rest is not None)
        or trace_id == "0" * 32
        or span_id == "0" * 16
    ):
        return None
    tracestate = (headers.get(TRACESTATE) or "").strip() or None
    if tracestate is not None and len(tracestate) > MAX_TRACESTATE_CHARS:
        tracestate = None  # the spec: an oversized tracestate may be dropped whole
    return TraceContext(traceparent, tracestate)
