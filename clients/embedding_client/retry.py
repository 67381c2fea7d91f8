"""Retrying what an overloaded or unreachable server refused, so a crowd of
clients backs off instead of turning overload into a storm of refusals.

What is retried: UNAVAILABLE and RESOURCE_EXHAUSTED (gRPC), 429 and 503
(HTTP), and a connection that could not be made. Never a bad request, a
refused key or a client timeout: sending those again cannot succeed, or adds
load where the server is already too slow. Each retry waits a random time up
to an exponentially growing cap ("full jitter"), at least what the refusal
asks (over gRPC its trailers' grpc-retry-pushback-ms or retry-after, over
HTTP its Retry-After header), and all of a call's attempts end by its
deadline. A per-client budget (a token bucket, as gRPC's retry throttling
and Envoy's retry budgets keep) stops retrying while most calls fail, so
retries stay a bounded share of what the client sends; a refusal it does
not retry still returns only after such a wait, so a caller that sends
again at once is held back as well.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from embedding_client.errors import UnavailableError

Result = TypeVar("Result")

# The refusals worth sending again; None: the server could not be reached.
RETRYABLE_STATUSES = frozenset(
    {"StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED", "429", "503", None}
)
# Bounds past which a setting is a mistake, refused when the client is built.
MAX_ATTEMPTS = 20
MAX_BACKOFF_S = 60.0
MAX_DEADLINE_S = 3600.0


@dataclass(frozen=True)
class RetryPolicy:
    """max_attempts: sends of one request, the first included (1: never
    retry). initial_backoff_s and max_backoff_s: the cap of the random wait
    before retry n is initial_backoff_s * 2**(n-1), at most max_backoff_s.
    deadline_s: no retry of a request starts later than this after its
    first send (an attempt under way runs to the client's timeout_s).
    budget_tokens and budget_ratio: the retry budget; each refusal spends a
    token, each answer earns budget_ratio of one, and a refusal is retried
    only while more than half the tokens are left."""

    max_attempts: int = 5
    initial_backoff_s: float = 0.05
    # With 160 refused clients, 1 s kept the server busy (0.90-0.99 of its
    # peak in four runs), where 2 s once left it idle between their waits
    # (0.83, its CPU 0.87 busy) and doubles the wait of the calls the budget
    # refuses (docs/performance.md, "A crowd of clients").
    max_backoff_s: float = 1.0
    deadline_s: float = 30.0
    budget_tokens: float = 10.0
    budget_ratio: float = 0.1

    def __post_init__(self) -> None:
        checks = (
            ("max_attempts", self.max_attempts, 1, MAX_ATTEMPTS),
            ("initial_backoff_s", self.initial_backoff_s, 0.0, MAX_BACKOFF_S),
            ("max_backoff_s", self.max_backoff_s, self.initial_backoff_s, MAX_BACKOFF_S),
            ("deadline_s", self.deadline_s, 0.0, MAX_DEADLINE_S),
            ("budget_tokens", self.budget_tokens, 1.0, 1000.0),
            ("budget_ratio", self.budget_ratio, 0.0, 1.0),
        )
        if not isinstance(self.max_attempts, int) or isinstance(self.max_attempts, bool):
            raise ValueError(
                f"retry setting max_attempts must be a whole number, got {self.max_attempts!r}"
            )
        for name, value, low, high in checks:
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or not low <= value <= high:
                raise ValueError(f"retry setting {name} must lie in [{low}, {high}], got {value!r}")

    def backoff_cap_s(self, retry: int) -> float:
        """The most retry `retry` (1 for the first) waits."""
        return min(self.max_backoff_s, self.initial_backoff_s * 2 ** (retry - 1))


DEFAULT_RETRY = RetryPolicy()
# Sends once: every refusal reaches the caller.
NO_RETRIES = RetryPolicy(max_attempts=1)


class RetryBudget:
    """gRPC's retry throttling: a bucket of `tokens`, which refusals drain
    and answers refill by `ratio`; retries pause while it is half empty.
    Shared by every call of a client, from any thread."""

    def __init__(self, tokens: float, ratio: float) -> None:
        self._max = tokens
        self._ratio = ratio
        self._tokens = tokens
        self._lock = threading.Lock()

    def answered(self) -> None:
        with self._lock:
            self._tokens = min(self._max, self._tokens + self._ratio)

    def refused(self) -> bool:
        """Spends a token for a refusal; whether a retry may follow."""
        with self._lock:
            self._tokens = max(0.0, self._tokens - 1.0)
            return self._tokens > self._max / 2


def retryable(error: UnavailableError) -> bool:
    return error.status in RETRYABLE_STATUSES


class Retrier:
    """A client's policy, its budget and its random waits."""

    def __init__(self, policy: RetryPolicy, seed: int | None = None) -> None:
        self.policy = policy
        self._budget = RetryBudget(policy.budget_tokens, policy.budget_ratio)
        self._random = random.Random(seed)

    def after_refusal(
        self, error: UnavailableError, retry: int, deadline: float
    ) -> tuple[float, bool]:
        """After `error`, the wait and whether retry `retry` follows it. No
        wait and no retry where the refusal is not retryable, the attempts
        are spent or the deadline is near. Where the budget is spent, no
        retry either, but the wait a retry would have had at most: a caller
        that sends its next request at once is held back too."""
        remaining = deadline - time.monotonic()
        if not retryable(error) or retry >= self.policy.max_attempts or remaining <= 0:
            return 0.0, False
        if not self._budget.refused():
            return min(self._random.uniform(0.0, self.policy.max_backoff_s), remaining), False
        wait = self._random.uniform(0.0, self.policy.backoff_cap_s(retry))
        # The server's word, where it gave one, as the least wait: bounded
        # by the deadline like any other, so a huge one ends the call now.
        wait = max(wait, error.retry_after_s or 0.0)
        return (wait, True) if wait < remaining else (0.0, False)

    def run(self, first: Callable[[], Result], again: Callable[[], Result] | None = None) -> Result:
        """first(), then again() (first, if None) after each retryable
        refusal, until an answer or the policy gives up; the last refusal is
        raised then."""
        deadline = time.monotonic() + self.policy.deadline_s
        attempt, retry = first, 1
        while True:
            try:
                result = attempt()
            except UnavailableError as error:
                wait, retrying = self.after_refusal(error, retry, deadline)
                time.sleep(wait)
                if not retrying:
                    raise
                attempt, retry = again or first, retry + 1
                continue
            self._budget.answered()
            return result

    async def run_async(self, attempt: Callable[[], Awaitable[Result]]) -> Result:
        """run's asyncio twin."""
        deadline = time.monotonic() + self.policy.deadline_s
        retry = 1
        while True:
            try:
                result = await attempt()
            except UnavailableError as error:
                wait, retrying = self.after_refusal(error, retry, deadline)
                await asyncio.sleep(wait)
                if not retrying:
                    raise
                retry += 1
                continue
            self._budget.answered()
            return result
