"""The gateway's span exporter: OTLP over HTTP in its JSON encoding (POST
to the collector's /v1/traces), on the standard library, from a thread of
its own, so that no request waits for a collector or fails with it.

A request's spans join a bounded queue when it is answered; the thread
sends them every EXPORT_INTERVAL_S, or sooner once a batch is full, each
POST bounded by EXPORT_TIMEOUT_S. Spans that find the queue full, or whose
export fails, are dropped and counted, never retried: a collector that is
down would otherwise hold the queue for spans it cannot take. Every
DROP_REPORT_INTERVAL_S with drops, one warning line says how many and why.
At shutdown the queue is flushed within FLUSH_TIMEOUT_S.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, deque
from collections.abc import Sequence

from embedding_gateway.tracing import Span

# About 500 traced requests of 4 spans each: a burst the thread catches up
# with, in a few MB.
QUEUE_SPANS = 2048
BATCH_SPANS = 512
EXPORT_INTERVAL_S = 1.0
# Short: a collector that does not answer delays only the exports behind it.
EXPORT_TIMEOUT_S = 2.0
FLUSH_TIMEOUT_S = 5.0
DROP_REPORT_INTERVAL_S = 10.0
SCOPE_NAME = "embedding_gateway"
STATUS_ERROR = 2
# The logging `extra` field of a drop report's count (logs.py writes it).
DROPPED_FIELD = "dropped_spans"

logger = logging.getLogger(__name__)


def _value(value: str | int) -> dict[str, str]:
    # OTLP's JSON encoding writes 64-bit integers as decimal strings.
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": value}


def _attributes(attributes: dict[str, str | int]) -> list[dict[str, object]]:
    return [{"key": key, "value": _value(value)} for key, value in attributes.items()]


def _span(span: Span) -> dict[str, object]:
    encoded: dict[str, object] = {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "name": span.name,
        "kind": int(span.kind),
        "startTimeUnixNano": str(span.start_ns),
        "endTimeUnixNano": str(span.end_ns),
        "attributes": _attributes(span.attributes),
    }
    if span.parent_id is not None:
        encoded["parentSpanId"] = span.parent_id
    if span.trace_state:
        encoded["traceState"] = span.trace_state
    if span.error is not None:
        encoded["status"] = {"code": STATUS_ERROR, "message": span.error}
    return encoded


def otlp_json(spans: Sequence[Span], service_name: str) -> bytes:
    """An ExportTraceServiceRequest in OTLP's JSON encoding (ids in hex)."""
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes({"service.name": service_name})},
                "scopeSpans": [
                    {"scope": {"name": SCOPE_NAME}, "spans": [_span(span) for span in spans]}
                ],
            }
        ]
    }
    return json.dumps(request, separators=(",", ":")).encode()


def _rejected(answer: bytes) -> tuple[int, str] | None:
    """The spans a collector's partial success refused, and why, if any."""
    try:
        partial = json.loads(answer or b"{}").get("partialSuccess") or {}
        count = int(partial.get("rejectedSpans") or 0)
    except (ValueError, AttributeError):
        return None  # an answer without a readable partial success: a success
    return (count, str(partial.get("errorMessage") or "no reason given")) if count else None


class SpanExporter:
    """Exports the spans `submit` is given to `url` (a collector's
    /v1/traces) as `service_name`. `capacity` bounds the queue;
    `report_interval_s` is how often drops are reported."""

    def __init__(
        self,
        url: str,
        service_name: str,
        *,
        capacity: int = QUEUE_SPANS,
        report_interval_s: float = DROP_REPORT_INTERVAL_S,
    ) -> None:
        self._url = url
        self._service_name = service_name
        self._capacity = capacity
        self._report_interval_s = report_interval_s
        self._lock = threading.Lock()
        self._queue: deque[Span] = deque()
        # Spans dropped since the last report, by why.
        self._drops: Counter[str] = Counter()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="otlp-exporter", daemon=True)
        self._thread.start()

    def submit(self, spans: Sequence[Span]) -> None:
        """Queues one request's spans, all or none (half a trace misleads);
        never blocks: the event loop calls it."""
        with self._lock:
            if len(self._queue) + len(spans) > self._capacity:
                self._drops[f"found the queue full ({self._capacity} spans)"] += len(spans)
                return
            self._queue.extend(spans)
            batch_ready = len(self._queue) >= BATCH_SPANS
        if batch_ready:
            self._wake.set()

    def close(self) -> None:
        """Flushes the queue (within FLUSH_TIMEOUT_S), reports what was
        dropped since the last report and stops the thread."""
        self._closing.set()
        self._wake.set()
        self._thread.join(FLUSH_TIMEOUT_S + EXPORT_TIMEOUT_S)

    def _run(self) -> None:
        reported = time.monotonic()
        while True:
            self._wake.wait(EXPORT_INTERVAL_S)
            self._wake.clear()
            closing = self._closing.is_set()
            self._export(self._take(), time.monotonic() + FLUSH_TIMEOUT_S if closing else None)
            now = time.monotonic()
            if closing or now - reported >= self._report_interval_s:
                self._report(now - reported)
                reported = now
            if closing:
                return

    def _take(self) -> list[Span]:
        with self._lock:
            spans = list(self._queue)
            self._queue.clear()
        return spans

    def _export(self, spans: list[Span], deadline: float | None) -> None:
        """Sends `spans` in batches; past `deadline` (None: none) drops the rest."""
        for start in range(0, len(spans), BATCH_SPANS):
            timeout_s = EXPORT_TIMEOUT_S
            if deadline is not None:
                timeout_s = min(timeout_s, deadline - time.monotonic())
                if timeout_s <= 0:
                    self._drop(len(spans) - start, "were left unsent at shutdown")
                    return
            lost = self._post(spans[start : start + BATCH_SPANS], timeout_s)
            if lost is not None:
                self._drop(*lost)

    def _post(self, batch: list[Span], timeout_s: float) -> tuple[int, str] | None:
        """One POST; the spans it lost and why, or None."""
        request = urllib.request.Request(
            self._url,
            data=otlp_json(batch, self._service_name),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as reply:
                answer = reply.read()
        except urllib.error.HTTPError as error:
            return len(batch), f"were refused by {self._url}: HTTP {error.code} {error.reason}"
        except urllib.error.URLError as error:
            return len(batch), f"failed to reach {self._url}: {error.reason}"
        except (OSError, http.client.HTTPException) as error:
            # A timeout or a connection lost after it was made.
            why = str(error) or type(error).__name__
            return len(batch), f"failed to reach {self._url}: {why}"
        rejected = _rejected(answer)
        if rejected is None:
            return None
        count, why = rejected
        return count, f"were rejected by {self._url}: {why}"

    def _drop(self, count: int, why: str) -> None:
        with self._lock:
            self._drops[why] += count

    def _report(self, seconds: float) -> None:
        with self._lock:
            drops, self._drops = self._drops, Counter()
        total = sum(drops.values())
        if total:
            logger.warning(
                "dropped %d spans in the last %.0f s: %s",
                total,
                seconds,
                "; ".join(f"{count} {why}" for why, count in drops.items()),
                extra={DROPPED_FIELD: total},
            )
