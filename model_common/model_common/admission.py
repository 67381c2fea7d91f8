"""Admission before work: the first stage of `embed` (the tokenizer) holds
new work while the embedder already has enough waiting.

Under overload the backlog forms at the slowest stage, the embedder. If the
tokenizer kept tokenizing, requests would pile up in the embedder's queue and
be refused there, after their tokenization was paid for. Held at the
tokenizer instead, new requests wait untokenized in the tokenizer's own
bounded queue, and past its bound Triton refuses them at once: a refusal
costs no tokenization and no copy between stages.

The embedder's backlog is Triton's own gauge of its queued requests
(nv_inference_pending_request_count), read from the metrics endpoint the
launcher names in EMBEDDING_METRICS_URL. A reading costs the server and this
stage about 0.3 ms of CPU, more than tokenizing a short request
(perf/results/debian12-2core/served_path.md), so it is not taken at
every execute: between readings the backlog is the last reading moved by the
stages' shared counts (model_common.backlog), and the gauge is read again
when that estimate reaches the limit or the reading is older than
READING_MAX_AGE_S.

The limit is counted in requests but set by tokens (BacklogLimit): the
embedder's time is about proportional to the real tokens it runs, whatever
the text length (perf/results/debian12-2core/served_path.md), so a fixed
count of requests would hold back one-text requests (too few rows waiting
to fill an execute) while letting requests of long texts wait past their
deadline in the embedder's queue.
"""

from __future__ import annotations

import time
import urllib.request
from dataclasses import dataclass, field

from model_common.backlog import Backlog

METRICS_URL_VARIABLE = "EMBEDDING_METRICS_URL"
PENDING_METRIC = "nv_inference_pending_request_count"
METRICS_TIMEOUT_S = 1.0
# How long the counts alone may stand for the gauge: requests sent straight
# to the embedder (`embed_tokens`) pass no tokenizer count, so for at most
# this long the estimate can miss them.
READING_MAX_AGE_S = 0.1
# The weight of each execute's released requests in the mean tokens per
# request: a change of traffic moves the limit within a few executes.
MEAN_WEIGHT = 0.25


def pending_requests(metrics_text: str, model: str) -> int:
    """The model's queued requests (all versions) in Triton's metrics text."""
    prefix = f'{PENDING_METRIC}{{model="{model}",'
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in metrics_text.splitlines()
        if line.startswith(prefix)
    )


def read_pending(metrics_url: str, model: str) -> int:
    """The model's queued requests, read from Triton's metrics endpoint;
    raises OSError when it cannot be read."""
    with urllib.request.urlopen(metrics_url, timeout=METRICS_TIMEOUT_S) as reply:
        return pending_requests(reply.read().decode(), model)


@dataclass
class BacklogLimit:
    """The requests the embedder may have waiting: as many as hold `tokens`
    real tokens at the mean of the requests released lately, at least one,
    at most `requests` (under the embedder queue's bound). Before any
    release, `requests`."""

    tokens: int
    requests: int
    _mean: float | None = field(default=None, init=False)

    def released(self, requests: int, tokens: int) -> None:
        """Counts `requests` released to the embedder with `tokens` in all."""
        if requests == 0:
            return
        mean = tokens / requests
        self._mean = mean if self._mean is None else self._mean + MEAN_WEIGHT * (mean - self._mean)

    def value(self) -> int:
        if self._mean is None:
            return self.requests
        return max(1, min(self.requests, int(self.tokens / self._mean)))


@dataclass
class BacklogGate:
    """Waits while `model` has its `limit` of requests queued or more."""

    metrics_url: str
    model: str
    limit: BacklogLimit
    backlog: Backlog
    poll_s: float = 0.005
    max_age_s: float = READING_MAX_AGE_S
    # The counts' value minus the gauge at the last reading, and when.
    _offset: int = field(default=0, init=False)
    _read_at: float = field(default=float("-inf"), init=False)

    def _read(self) -> int:
        """The gauge, which also corrects the counts' drift."""
        self.backlog.rescan()
        pending = read_pending(self.metrics_url, self.model)
        self._offset = self.backlog.value() - pending
        self._read_at = time.monotonic()
        return pending

    def estimate(self) -> int:
        return self.backlog.value() - self._offset

    def wait(self) -> float:
        """Returns once the backlog is under the limit; the seconds waited."""
        started = time.monotonic()
        limit = self.limit.value()
        if self.estimate() < limit and started - self._read_at < self.max_age_s:
            return 0.0
        while self._read() >= limit:
            time.sleep(self.poll_s)
        return time.monotonic() - started
