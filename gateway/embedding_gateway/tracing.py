"""The gateway's own OpenTelemetry spans: --otlp-endpoint and
--trace-sampling, and each request's trace.

With an endpoint, a request that carries a valid W3C context
(trace_context.py) is always traced, as a child of the caller's span:
Triton traces it anyway (server/tracing.py). Of the others, a share RATIO,
drawn at random, is traced as a new trace. A traced request gets a SERVER
span for its route ("POST /v1/embeddings") with children: "parse" (reading
and validating the body), "tokenize" where the gateway tokenizes, and a
CLIENT span per call to Triton ("call MODEL"), whose id is the parent in the
traceparent Triton is sent, so Triton's spans of that call are its children.

Triton traces every request that carries a context, whatever its sampled
flag, so an untraced request sends Triton only what it came with: nothing
of the gateway's, which would trace it at Triton and override the server's
--trace-sampling. Without an endpoint the gateway makes no spans and passes
a caller's context on unchanged.

The spans of a request go to the exporter (otlp.py) when it is answered,
never waiting for it.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum

from aiohttp import web
from embedding_catalog.trace_options import DEFAULT_SAMPLING, TRACES_PATH, add_trace_options

from embedding_gateway.trace_context import TRACEPARENT, TRACESTATE, TraceContext

# Beside Triton's `triton-embeddings` in the trace backend.
SERVICE_NAME = "embedding-gateway"
# The route span's attributes: OpenTelemetry's HTTP names, and the service's
# own (the model called, the number of inputs: texts, token-id rows or
# documents; on an embeddings request, its tokens as its usage counts them).
# The gateway knows no tenant: the edge behind it does.
METHOD_ATTRIBUTE = "http.request.method"
ROUTE_ATTRIBUTE = "http.route"
PATH_ATTRIBUTE = "url.path"
STATUS_ATTRIBUTE = "http.response.status_code"
MODEL_ATTRIBUTE = "embedding.model"
TEXTS_ATTRIBUTE = "embedding.texts"
TOKENS_ATTRIBUTE = "embedding.tokens"
# A call span's: the Triton model, under the name Triton's spans use.
TRITON_MODEL_ATTRIBUTE = "triton.model_name"
# W3C trace flags: the gateway records every request it passes a context of
# its own for.
SAMPLED = "01"


@dataclass(frozen=True)
class TraceSettings:
    endpoint: str  # the collector's OTLP/HTTP base address
    ratio: float = DEFAULT_SAMPLING

    @property
    def url(self) -> str:
        return self.endpoint + TRACES_PATH

    def describe(self) -> str:
        share = f"{self.ratio:g} of the requests without a traceparent"
        return f"spans to {self.url} as {SERVICE_NAME}: every request with a traceparent, {share}"


def add_tracing_arguments(
    parser: argparse.ArgumentParser, environment: Mapping[str, str] = os.environ
) -> None:
    """The options, their defaults from `environment`, as the launcher's."""
    add_trace_options(parser, environment, "the gateway's spans", "drawn at random")


def settings_from_arguments(args: argparse.Namespace) -> TraceSettings | None:
    if not args.otlp_endpoint:
        return None
    return TraceSettings(args.otlp_endpoint, args.trace_sampling)


class SpanKind(IntEnum):
    """OTLP's values."""

    INTERNAL = 1
    SERVER = 2
    CLIENT = 3


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: SpanKind
    start_ns: int
    end_ns: int = 0
    attributes: dict[str, str | int] = field(default_factory=dict)
    # The caller's tracestate, which every span of its trace carries.
    trace_state: str | None = None
    # Where the span's work failed: why (its status is then ERROR).
    error: str | None = None


Submit = Callable[[Sequence[Span]], None]


def _failure(error: BaseException) -> str:
    return str(error) or type(error).__name__


class RequestTrace:
    """One request's spans where it is traced (`route`, its SERVER span);
    otherwise only the caller's context, which its calls pass on."""

    def __init__(
        self,
        caller: TraceContext | None,
        route: Span | None = None,
        submit: Submit | None = None,
    ) -> None:
        self._caller = caller
        self._route = route
        self._submit = submit
        self._spans: list[Span] = []
        # The last failure of a child span: why the request failed, if it did.
        self._failure: str | None = None

    @property
    def trace_id(self) -> str | None:
        """The trace the answer's x-trace-id names and the request's log
        lines carry: its spans' or, untraced, the caller's, if any."""
        if self._route is not None:
            return self._route.trace_id
        return self._caller.trace_id if self._caller is not None else None

    def describe(self, model: str, texts: int) -> None:
        """The model the request names and its number of inputs."""
        if self._route is not None:
            self._route.attributes.update({MODEL_ATTRIBUTE: model, TEXTS_ATTRIBUTE: texts})

    def count_tokens(self, tokens: int) -> None:
        """The request's tokens, as its answer's usage counts them."""
        if self._route is not None:
            self._route.attributes[TOKENS_ATTRIBUTE] = tokens

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        """A step of the gateway's own work, a child of the route span."""
        if self._route is None:
            yield
            return
        with self._child(self._route, name, SpanKind.INTERNAL, {}):
            yield

    @contextmanager
    def call(self, model: str) -> Iterator[dict[str, str] | None]:
        """One call to Triton's `model`: yields the trace context headers to
        send with it (None: none), traced as a CLIENT span whose id is the
        parent Triton is sent."""
        if self._route is None:
            yield self._caller.headers() if self._caller is not None else None
            return
        attributes: dict[str, str | int] = {TRITON_MODEL_ATTRIBUTE: model}
        with self._child(self._route, f"call {model}", SpanKind.CLIENT, attributes) as span:
            headers = {TRACEPARENT: f"00-{span.trace_id}-{span.span_id}-{SAMPLED}"}
            if span.trace_state:
                headers[TRACESTATE] = span.trace_state
            yield headers

    @contextmanager
    def _child(
        self, route: Span, name: str, kind: SpanKind, attributes: dict[str, str | int]
    ) -> Iterator[Span]:
        span = Span(
            route.trace_id,
            secrets.token_hex(8),
            route.span_id,
            name,
            kind,
            time.time_ns(),
            attributes=attributes,
            trace_state=route.trace_state,
        )
        try:
            yield span
        except BaseException as error:
            span.error = self._failure = _failure(error)
            raise
        finally:
            span.end_ns = time.time_ns()
            self._spans.append(span)

    def answered(self, status: int) -> None:
        """Ends the route span with the answer's status and hands the spans
        on. Failed as OpenTelemetry's HTTP conventions have a server span
        fail: on a 5xx only, a 4xx being the client's error (the failing
        child span says why either way)."""
        if self._route is None:
            return
        self._route.attributes[STATUS_ATTRIBUTE] = status
        if status >= 500:
            self._route.error = self._failure or f"answered {status}"
        self._finish(self._route)

    def abandoned(self, error: BaseException) -> None:
        """Ends the route span of a request that got no answer from here."""
        if self._route is None:
            return
        self._route.error = _failure(error)
        self._finish(self._route)

    def _finish(self, route: Span) -> None:
        route.end_ns = time.time_ns()
        if self._submit is not None:
            self._submit([*self._spans, route])


# A request the gateway neither traces nor has a caller's context for.
UNTRACED = RequestTrace(None)
# Each request's, set by the app's middleware before any handler runs.
REQUEST_TRACE = web.RequestKey("trace", RequestTrace)


class Tracer:
    """Decides which requests are traced and starts their route spans;
    `submit` takes each traced request's spans (None: no spans at all)."""

    def __init__(self, submit: Submit | None, ratio: float = DEFAULT_SAMPLING) -> None:
        self._submit = submit
        self._ratio = ratio

    def start(
        self, caller: TraceContext | None, name: str, attributes: dict[str, str | int]
    ) -> RequestTrace:
        # random() < 1 always and < 0 never: ratios 1 and 0 are exact.
        if self._submit is None or (caller is None and random.random() >= self._ratio):
            return RequestTrace(caller)
        route = Span(
            caller.trace_id if caller is not None else secrets.token_hex(16),
            secrets.token_hex(8),
            caller.span_id if caller is not None else None,
            name,
            SpanKind.SERVER,
            time.time_ns(),
            attributes=attributes,
            trace_state=caller.tracestate if caller is not None else None,
        )
        return RequestTrace(caller, route, self._submit)
