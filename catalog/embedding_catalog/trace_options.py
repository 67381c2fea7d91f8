"""The trace options the launcher (server/tracing.py, with its edge) and the
gateway (embedding_gateway.tracing) both take, declared once here, where
both import them: --otlp-endpoint, the collector's OTLP/HTTP base address,
and --trace-sampling, the share of requests without a caller's context to
trace; their defaults, the environment variables that set those defaults,
and their checks. The gateway cannot import server/, nor the launcher the
gateway (it runs where the gateway is not installed, the GPU image), and
both have this package. Standard library only."""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Mapping

# Of the requests without a context: one in 100 keeps a steady sample of
# traces from every client at a cost lost in the noise
# (perf/results/debian12-2core/tracing_overhead.md), keeps the collector's
# load (8 spans per ensemble request, exported in batches off the request
# path) small, and stays far below the traced rates at which Triton 2.51
# crashes (docs/operations.md, "Traces"). A caller who wants a given
# request traced sends a traceparent, traced at any ratio.
DEFAULT_SAMPLING = 0.01
# Where an OTLP/HTTP collector takes traces, below its base address (the
# OpenTelemetry specification's signal path, as OTEL_EXPORTER_OTLP_ENDPOINT
# is read).
TRACES_PATH = "/v1/traces"
# The options' defaults where they are set: a container's environment
# (docker-compose.yml), the same for every service that runs the launcher
# or the gateway whatever its command. Empty: unset.
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
            f"{text} is outside 0..1: give the share of requests without a traceparent to "
            "trace (1 every request, 0.01 one in 100, 0 only those that carry a traceparent)"
        )
    return value


def otlp_endpoint(text: str) -> str:
    """argparse type of --otlp-endpoint: an http(s) base address such as
    http://collector:4318, without the /v1/traces spans are posted to;
    empty: no tracing (so a compose file can pass an unset variable through)."""
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
            "(spans are exported over OTLP/HTTP only)"
        )
    if parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(f"{text!r}: a base address has no query or fragment")
    path = parts.path.rstrip("/")
    if path.endswith(TRACES_PATH):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give the collector's base address; {TRACES_PATH} is added to it"
        )
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def add_trace_options(
    parser: argparse.ArgumentParser, environment: Mapping[str, str], spans: str, drawn: str
) -> None:
    """The two options, their defaults from `environment`: argparse checks a
    string default with the option's type, so a bad value there is refused
    as the option's. spans: what is sent ("traces"); drawn: how the share is
    drawn, for the help."""
    parser.add_argument(
        "--otlp-endpoint",
        type=otlp_endpoint,
        default=environment.get(ENDPOINT_VARIABLE, ""),
        metavar="URL",
        help=f"send {spans} (OpenTelemetry) to this collector's OTLP/HTTP base address, "
        f"e.g. http://localhost:4318 ({TRACES_PATH} is added); default: "
        f"${ENDPOINT_VARIABLE}, else none",
    )
    parser.add_argument(
        "--trace-sampling",
        type=sampling_ratio,
        default=environment.get(SAMPLING_VARIABLE) or str(DEFAULT_SAMPLING),
        metavar="RATIO",
        help="with --otlp-endpoint, the share of requests without a traceparent to trace, "
        f"0..1, {drawn}; a request with a valid traceparent is always traced "
        f"(default: ${SAMPLING_VARIABLE}, else {DEFAULT_SAMPLING})",
    )
