"""The gateway's log: one JSON object per line by default, which a log
pipeline indexes without a parser of its own, or, with --log-format text,
the lines it has always written (`TIME LEVEL message`, no access lines).

A JSON line holds `time` (ISO 8601, UTC, milliseconds), `level`, `logger`
and `message`. A line about a request (each request's access line, an
unexpected failure) adds `method`, `path`, `status`, `duration_ms` (access
lines) and, where the request has a trace (the caller's, or one the gateway
started: tracing.py), `trace_id`: the x-trace-id it was answered with,
under which its spans are found. The span exporter's drop reports add
`dropped_spans` (otlp.py).

The service's launcher (server/logs.py) writes the same fields; the two
cannot share a module: the gateway is installed without server/, and the
launcher runs on the standard library alone.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, Request, StreamResponse

from embedding_gateway.otlp import DROPPED_FIELD
from embedding_gateway.tracing import REQUEST_TRACE

FORMATS = ("json", "text")
DEFAULT_FORMAT = "json"
ACCESS_LOGGER = "embedding_gateway.access"
# What the gateway logged before JSON; kept exactly for --log-format text.
TEXT_FORMAT = "%(asctime)s %(levelname)s %(message)s"
# The attributes a line may carry (logging's `extra`), in this order: a
# request's, then a drop report's count.
FIELDS = ("trace_id", "method", "path", "status", "duration_ms", DROPPED_FIELD)
HEALTH_PREFIX = "/health/"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(log_format: str) -> None:
    """The process's log, on stderr, in `log_format` (one of FORMATS)."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


def request_fields(request: BaseRequest) -> dict[str, object]:
    """A request's fields for logging's `extra`: its trace id, if any, its
    method and path (without the query, which may hold anything)."""
    # None on a request aiohttp answered itself (a malformed one), which
    # never reached the app.
    trace = request.get(REQUEST_TRACE)
    return {
        "trace_id": trace.trace_id if trace is not None else None,
        "method": request.method,
        "path": request.path,
    }


class JsonAccessLogger(AbstractAccessLogger):
    """One line per answered request (aiohttp's access log, given to
    run_app as access_log_class), timed from its first byte to its answer."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        duration_ms = round(time * 1000, 3)
        # Probes come every few seconds from each kubelet and balancer: at
        # info level they would drown the requests.
        level = logging.DEBUG if request.path.startswith(HEALTH_PREFIX) else logging.INFO
        self.logger.log(
            level,
            "%s %s %d %.1f ms",
            request.method,
            request.path,
            response.status,
            duration_ms,
            extra={
                **request_fields(request),
                "status": response.status,
                "duration_ms": duration_ms,
            },
        )


def failure_fields(request: Request) -> dict[str, object]:
    """An unexpected failure's fields: the request's, answered 500."""
    return {**request_fields(request), "status": 500}
