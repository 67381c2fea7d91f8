"""Traces with OpenTelemetry: the launcher's --otlp-endpoint and
--trace-sampling, as tritonserver's --trace-config settings.

Triton 2.51 (release 24.10) exports spans over OTLP/HTTP only, to one URL
(the collector's base address + /v1/traces), from a batch span processor
on its own thread: a collector that is down costs failed exports, never a
request. Per request it writes an `InferRequest` span (the HTTP or gRPC
receive and send as events), a span per model (the ensemble and each of
its stages; events REQUEST_START, QUEUE_START, REQUEST_END) and a `compute`
span under each stage (COMPUTE_START, COMPUTE_INPUT_END,
COMPUTE_OUTPUT_START, COMPUTE_END).

Which requests (Triton's tracer.cc, TraceSetting::SampleTrace and
GetTraceStartOptions):
- A request that carries a valid W3C context (`traceparent`, HTTP header
  or gRPC metadata) is always traced, as a child of the caller's span,
  whatever the sampling setting and whatever the context's sampled flag
  (Triton's tracer provider samples every span it is asked for).
- Of the others, Triton traces a request when its number, counting every
  inference request since the start, is a multiple of `rate` (counted, not
  drawn at random); `rate=0` traces none of them. A ratio r is therefore
  served as rate round(1/r): 1 traces every request, 0.01 one in 100, 0.3
  one in 3; 0 only the requests that carry a context.

Standard library and the catalog package only: the launcher runs without
the serving environment's packages. The two options' defaults, variables
and checks are the gateway's too (gateway/embedding_gateway/tracing.py):
both read them from the catalog package (embedding_catalog.trace_options).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass

from embedding_catalog.trace_options import DEFAULT_SAMPLING, TRACES_PATH, add_trace_options

DEFAULT_SERVICE_NAME = "triton-embeddings"
# Triton reads `rate` as an unsigned 32-bit count.
MAX_RATE = 2**32 - 1


def service_name(text: str) -> str:
    """argparse type of --trace-service-name: Triton reads its resource
    setting as key=value, so the name is one printable token."""
    if not text or any(c.isspace() or not c.isprintable() for c in text) or "," in text:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a service name is one word without spaces or commas"
        )
    return text


def triton_rate(ratio: float) -> int:
    """Triton's rate (trace one in every N requests without a context) for
    a sampling ratio: 0 stays 0 (none of them)."""
    if ratio <= 0.0:
        return 0
    return min(MAX_RATE, max(1, round(1.0 / ratio)))


@dataclass(frozen=True)
class Tracing:
    endpoint: str  # the collector's OTLP/HTTP base address
    ratio: float = DEFAULT_SAMPLING
    service_name: str = DEFAULT_SERVICE_NAME

    @property
    def url(self) -> str:
        return self.endpoint + TRACES_PATH

    @property
    def rate(self) -> int:
        return triton_rate(self.ratio)

    def server_arguments(self) -> list[str]:
        """tritonserver's --trace-config settings for these traces."""
        return [
            "--trace-config=mode=opentelemetry",
            f"--trace-config=opentelemetry,url={self.url}",
            f"--trace-config=opentelemetry,resource=service.name={self.service_name}",
            f"--trace-config=rate={self.rate}",
            # Span timestamps (queue, compute) are what a trace is for here;
            # TENSORS is not supported in OpenTelemetry mode.
            "--trace-config=level=TIMESTAMPS",
            # Triton's default; said here because a count would silently
            # stop the sampled traces (not those with a context) after it.
            "--trace-config=count=-1",
        ]

    def describe(self) -> str:
        if self.rate == 0:
            share = "only requests that carry a traceparent"
        elif self.rate == 1:
            share = "every request"
        else:
            share = (
                f"one in {self.rate} requests (sampling {self.ratio:g}) "
                "and every request that carries a traceparent"
            )
        return f"traces to {self.url} as {self.service_name}: {share}"


def add_tracing_arguments(
    parser: argparse.ArgumentParser, environment: Mapping[str, str] = os.environ
) -> None:
    """The options, their defaults from `environment`."""
    add_trace_options(
        parser,
        environment,
        "traces",
        "served as one in round(1/RATIO); with --tenants the edge draws the share at random "
        "and follows a traceparent's sampled flag",
    )
    parser.add_argument(
        "--trace-service-name",
        type=service_name,
        default=DEFAULT_SERVICE_NAME,
        metavar="NAME",
        help="the service.name of the server's spans (default: %(default)s)",
    )


def tracing_from_arguments(args: argparse.Namespace) -> Tracing | None:
    if not args.otlp_endpoint:
        return None
    return Tracing(args.otlp_endpoint, args.trace_sampling, args.trace_service_name)
