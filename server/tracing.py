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

Standard library only: the launcher runs without the serving environment's
packages. The gateway's spans (gateway/embedding_gateway/tracing.py)
take the same options: it keeps copies of this module's defaults, variables
and checks, as it cannot import server/; tests/test_tracing.py holds them
equal, so change them here and there together.
"""

from __future__ import annotations

import argparse
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

# Of the requests without a context: one in 100 keeps a steady sample of
# traces from every client at a cost lost in the noise
# (perf/results/debian12-2core/tracing_overhead.md), keeps the collector's
# load (8 spans per ensemble request, exported in batches off the request
# path) small, and stays far below the traced rates at which Triton 2.51
# crashes (docs/operations.md, "Traces"). A caller who wants a given
# request traced sends a traceparent, traced at any ratio.
DEFAULT_SAMPLING = 0.01
DEFAULT_SERVICE_NAME = "triton-embeddings"
# Where an OTLP/HTTP collector takes traces, below its base address (the
# OpenTelemetry specification's signal path, as OTEL_EXPORTER_OTLP_ENDPOINT
# is read).
TRACES_PATH = "/v1/traces"
# Triton reads `rate` as an unsigned 32-bit count.
MAX_RATE = 2**32 - 1
# The options' defaults where they are set: a container's environment
# (docker-compose.yml), the same for every service that runs the launcher
# whatever its command. Empty: unset.
ENDPOINT_VARIABLE = "EMBEDDING_OTLP_ENDPOINT"
SAMPLING_VARIABLE = "EMBEDDING_TRACE_SAMPLING"


def sampling_ratio(text: str) -> float:
    """argparse type of --trace-sampling: a number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number: give the share of requests to trace, from 0 to 1"
        ) from None
    if not 0.0 <= value <= 1.0:  # NaN fails this too
        raise argparse.ArgumentTypeError(
            f"{text} is outside 0..1: give the share of requests to trace "
            "(1 every request, 0.01 one in 100, 0 only those that carry a traceparent)"
        )
    return value


def otlp_endpoint(text: str) -> str:
    """argparse type of --otlp-endpoint: an http(s) base address such as
    http://collector:4318, without the /v1/traces Triton posts to; empty:
    no tracing (so a compose file can pass an unset variable through)."""
    if text == "":
        return text
    try:
        parts = urllib.parse.urlsplit(text)
        port_ok = parts.port is None or parts.port > 0
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an OTLP/HTTP base address such as http://localhost:4318 "
            "(Triton exports over OTLP/HTTP only)"
        )
    if parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(f"{text!r}: a base address has no query or fragment")
    path = parts.path.rstrip("/")
    if path.endswith(TRACES_PATH):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give the collector's base address; {TRACES_PATH} is added to it"
        )
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


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
    """The options, their defaults from `environment`: argparse checks a
    string default with the option's type, so a bad value there is refused
    as the option's."""
    parser.add_argument(
        "--otlp-endpoint",
        type=otlp_endpoint,
        default=environment.get(ENDPOINT_VARIABLE, ""),
        metavar="URL",
        help="send traces (OpenTelemetry) to this collector's OTLP/HTTP base address, "
        f"e.g. http://localhost:4318 ({TRACES_PATH} is added); default: "
        f"${ENDPOINT_VARIABLE}, else no traces",
    )
    parser.add_argument(
        "--trace-sampling",
        type=sampling_ratio,
        default=environment.get(SAMPLING_VARIABLE) or str(DEFAULT_SAMPLING),
        metavar="RATIO",
        help="with --otlp-endpoint, the share of requests without a traceparent to trace, "
        "0..1 (served as one in round(1/RATIO)); a request with a valid traceparent is "
        "always traced; with --tenants the edge draws the share at random and follows a "
        f"traceparent's sampled flag (default: ${SAMPLING_VARIABLE}, else {DEFAULT_SAMPLING})",
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
