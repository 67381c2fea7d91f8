"""A caller's W3C trace context (traceparent, tracestate), passed on to
Triton with each request the gateway sends for it, so Triton's spans join
the caller's trace; its trace id goes back in the answer's TRACE_ID_HEADER.

The gateway makes no context of its own: Triton traces every request that
carries a valid context, whatever its sampled flag (server/tracing.py), so
a context made here for every request would trace them all and override
the server's --trace-sampling. A traceparent the W3C grammar refuses is not
passed on (Triton would ignore it).
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
