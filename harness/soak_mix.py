"""The soak's mix, declared once: what share of the requests is of each
class, how often the bursts, reloads and stub kills come, how much of the
run is warm-up, and the bounds its checks hold the service to. The
30-minute command and the suite's 2-minute run differ only in duration."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from server.shutdown_timings import EXIT_TIMEOUT_S

# Each worker's next request: its class, by weight.
#   good: a good request of any task, size and route, checked against its
#     reference; traced: the same with a sampled trace context;
#   bad: a bad request of any class, which must get its error;
#   cancelled: a good request the client cancels mid-flight;
#   deadline: a good request sent to Triton with a 1 µs queue deadline;
#   dropped: an HTTP request whose connection closes mid-body.
WEIGHTS = MappingProxyType(
    {"good": 60, "traced": 8, "bad": 16, "cancelled": 6, "deadline": 5, "dropped": 5}
)
# Closed-loop senders: a steady load that never queues past the models'
# queue deadlines, on the slowest machine too.
WORKERS = 4
# Triton's queue deadline of a deadline request: no request is dequeued
# that fast, so it expires in the queue (or, rarely, is answered).
DEADLINE_US = 1
# A cancelled request is cancelled up to this long after it is sent.
CANCEL_WITHIN_S = 0.02
# Every BURST_EVERY_S a burst of BURST_SIZE requests at once goes over the
# burst tenant's quota (harness/soak_stack.py: 5 a second, 4 in flight).
BURST_EVERY_S = 15.0
BURST_SIZE = 12
# A model reload and a stub kill this often (at least one of each in any
# run), rotating over the models' stages.
RELOAD_EVERY_S = 300.0
KILL_EVERY_S = 450.0
# The first share of the run (at least WARMUP_MIN_S) is warm-up: allocator
# pools, thread pools and caches fill. A stub started later (a reload's or
# a kill's replacement) has a warm-up as long from its first sample.
WARMUP_SHARE = 0.2
WARMUP_MIN_S = 20.0
# After the last kill the stubs must be back to what the catalog asks
# within the watchdog's grace for the old instance's stubs (EXIT_TIMEOUT_S)
# and a reload.
RECOVERY_S = EXIT_TIMEOUT_S + 60.0

# RSS growth per 100,000 requests after warm-up, per process: leaking the
# smallest answer this service gives (a reranker's 4-byte score) per
# request would be 0.4 MB, one MiniLM row (1.5 kB) 150 MB, a request's
# tensors several times that; the bound is below one row a request and
# above the drift measured on long runs (perf/results/*/soak.md).
RSS_GROWTH_PER_100K = 32 * 2**20
# A slope is judged over at least this many requests after warm-up (a
# 30-minute run has several times more). A shorter run (the suite's) cannot
# resolve one: its RSS may rise by the bound scaled to its requests plus
# RSS_SHORT_ALLOWANCE, what an engine's arena and shape caches still add as
# it meets larger batches (up to 52 MB for MiniLM's embedder two minutes in,
# on a 2-core Zen 5). It still catches a leak of 20 kB a request.
SLOPE_MIN_REQUESTS = 20_000
RSS_SHORT_ALLOWANCE = 64 * 2**20
# Descriptors, threads and the shared-memory folder: the level at the end
# (the median of the last LEVEL_SAMPLES samples) against the level after
# warm-up may rise by at most this. A reload holds both instances' threads
# for a moment (tritonserver: +37 threads), which a level does not count;
# a stub's region starts at 1 MiB and grows by 1 MiB steps.
LEVEL_SAMPLES = 5
# A kill's repair settles this long after the stubs are back (the ensembles
# reload after their stage).
KILL_SETTLE_S = 5.0
LEVEL_ALLOWANCES = MappingProxyType({"fds": 8.0, "threads": 4.0, "shm_bytes": 8.0 * 2**20})
SAMPLE_INTERVAL_S = 2.0


@dataclass(frozen=True)
class Schedule:
    """When a run of `seconds` reloads, kills and bursts, in seconds from its start."""

    seconds: float

    def _spread(self, every_s: float, phase: float) -> tuple[float, ...]:
        count = max(1, round(self.seconds / every_s))
        return tuple((index + phase) * self.seconds / count for index in range(count))

    @property
    def reloads(self) -> tuple[float, ...]:
        return self._spread(RELOAD_EVERY_S, 0.25)

    @property
    def kills(self) -> tuple[float, ...]:
        # Early enough in its share of the run that the stubs are back
        # before the next kill or the end.
        return self._spread(KILL_EVERY_S, 0.45)

    @property
    def bursts(self) -> tuple[float, ...]:
        count = int(self.seconds // BURST_EVERY_S)
        return tuple(BURST_EVERY_S * (index + 0.5) for index in range(count))

    @property
    def warmup_s(self) -> float:
        return max(WARMUP_MIN_S, WARMUP_SHARE * self.seconds)
