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

The limit is counted in requests but set by time of work (BacklogLimit):
the embedder's time is about proportional to the real tokens it runs,
whatever the text length (perf/results/debian12-2core/served_path.md), so a
fixed count of requests would hold back one-text requests (too few rows
waiting to fill an execute) while letting requests of long texts wait past
their deadline in the embedder's queue. And a fixed count of tokens is a
different time on every processor: what is a quarter of a second of work on
one core is a sixth on a faster one, and the cores starve between executes.
So the embedder counts the tokens it runs and its CPU time
(model_common.backlog), and the door turns its configured seconds into
tokens at the speed measured over the embedder's latest work, times the
CPUs the server may use (model_common.cores). Until the embedder has
worked WINDOW_CPU_S, no speed is known and the bound is the request bound
alone, as before any release.
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
# The embedder's CPU time over which each measure of its speed is taken:
# several executes, so that one execute's start-up costs or a count read
# between its tokens and its CPU time move it little, and short enough
# (about a quarter of a second of load on two cores) to follow a change of
# traffic.
WINDOW_CPU_S = 0.5


def tokens_of_work(seconds: float, tokens_per_cpu_s: float, cpus: float) -> int:
    """The real tokens an embedder running `tokens_per_cpu_s` on `cpus`
    CPUs runs in `seconds`."""
    return round(seconds * tokens_per_cpu_s * cpus)


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
    """The requests the embedder may have waiting: as many as hold `seconds`
    of its work (tokens_of_work at its measured speed over `cpus`) at the
    mean real tokens of the requests released lately, at least one, at most
    `requests` (under the embedder queue's bound). Before a release and a
    measured speed, `requests`."""

    seconds: float
    requests: int
    cpus: float
    _mean: float | None = field(default=None, init=False)
    _tokens_per_cpu_s: float | None = field(default=None, init=False)
    # The embedder's work (tokens, CPU seconds) where the current window began.
    _window_start: tuple[int, float] = field(default=(0, 0.0), init=False)

    def released(self, requests: int, tokens: int) -> None:
        """Counts `requests` released to the embedder with `tokens` in all."""
        if requests == 0:
            return
        mean = tokens / requests
        self._mean = mean if self._mean is None else self._mean + MEAN_WEIGHT * (mean - self._mean)

    def worked(self, tokens: int, cpu_s: float) -> None:
        """The embedder's work so far, in all: the tokens its instances ran
        and the CPU seconds they took. Once the window holds WINDOW_CPU_S,
        its speed is the window's, and a new window begins."""
        start_tokens, start_cpu_s = self._window_start
        if cpu_s < start_cpu_s or tokens < start_tokens:
            # The counts began again (a new folder of counts): so does the window.
            self._window_start = (tokens, cpu_s)
        elif cpu_s - start_cpu_s >= WINDOW_CPU_S:
            self._tokens_per_cpu_s = (tokens - start_tokens) / (cpu_s - start_cpu_s)
            self._window_start = (tokens, cpu_s)

    def tokens(self) -> int | None:
        """The tokens of `seconds` of work at the measured speed; None before one."""
        if self._tokens_per_cpu_s is None:
            return None
        return tokens_of_work(self.seconds, self._tokens_per_cpu_s, self.cpus)

    def value(self) -> int:
        tokens = self.tokens()
        if self._mean is None or tokens is None:
            return self.requests
        return max(1, min(self.requests, int(tokens / self._mean)))


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
        self.limit.worked(*self.backlog.work())
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
