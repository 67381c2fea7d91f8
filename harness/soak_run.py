"""The soak: the mix of harness/soak_mix.py sent by closed-loop workers for
a set time, with bursts over a quota, model reloads and stub kills on a
schedule, while every process is sampled (harness/process_watch.py). Every
request ends in an Outcome whose verdict compares its answer with the one
the same request got before the load."""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

from harness.process_watch import ProcessWatch, Sample
from harness.server import reload_model
from harness.soak_cases import (
    UNANSWERED,
    Answer,
    Case,
    Connections,
    bad_cases,
    burst_case,
    good_cases,
    same,
)
from harness.soak_mix import (
    BURST_SIZE,
    CANCEL_WITHIN_S,
    DEADLINE_US,
    RECOVERY_S,
    SAMPLE_INTERVAL_S,
    WEIGHTS,
    WORKERS,
    Schedule,
)
from harness.soak_stack import TENANT_KEY, SoakStack
from server.health import python_stubs

# Verdicts. right: the answer its reference predicts (a refusal for a bad
# request); failed: an error other than the reference's, allowed only while
# a killed stub of its model is being replaced; wrong: any other answer; lost:
# no answer; cancelled, dropped: the client gave up, as meant; expired: a
# deadline request refused for its deadline; refused: a burst's request over
# the quota.
RIGHT, FAILED, WRONG, LOST, CANCELLED, DROPPED, EXPIRED, REFUSED = (
    "right",
    "failed",
    "wrong",
    "lost",
    "cancelled",
    "dropped",
    "expired",
    "refused",
)
# How Triton refuses a request whose queue deadline passed, and how the
# edge refuses one over the quota.
EXPIRED_MESSAGE = "timeout"
# Traced requests looked up in Jaeger per route, and how long their spans
# may take to arrive (exporters send batches every few seconds).
TRACES_LOOKED_UP = 3
TRACE_EXPORT_S = 15.0
QUOTA_STATUSES = frozenset({"StatusCode.RESOURCE_EXHAUSTED", "StatusCode.UNAVAILABLE"})


@dataclass(frozen=True)
class Outcome:
    kind: str  # the mix's class, or "burst"
    case: str
    model: str
    route: str
    started_s: float  # since the run began
    ended_s: float
    status: str
    verdict: str
    message: str = ""


@dataclass(frozen=True)
class Event:
    kind: str  # reload or kill
    target: str  # the stage
    at_s: float
    done_s: float | None  # reloaded, or stubs back to what the catalog asks; None: never
    detail: str = ""


@dataclass
class SoakResult:
    seconds: float
    warmup_s: float
    outcomes: list[Outcome]
    events: list[Event]
    samples: list[Sample]
    stubs_asked: dict[str, int]  # by model, as the server started them
    stubs_after: dict[str, int]
    stage_models: dict[str, str]  # each Python-backend stage's catalog model
    # Of the last traced requests of each route, how many Jaeger holds.
    traces_found: dict[str, tuple[int, int]] = field(default_factory=dict)


class _Run:
    def __init__(self, stack: SoakStack, connections: Connections, seconds: float) -> None:
        self.stack = stack
        self.connections = connections
        self.seconds = seconds
        self.start = time.monotonic()
        self.outcomes: list[Outcome] = []
        self.events: list[Event] = []
        self.traced: dict[str, list[str]] = {}  # trace ids by route
        self.references: dict[str, Answer] = {}

    def now(self) -> float:
        return time.monotonic() - self.start

    def over(self) -> bool:
        return self.now() >= self.seconds

    def record(self, kind: str, case: Case, started: float, answer: Answer, verdict: str) -> None:
        self.record_named(kind, case.name, case.model, case.route, started, answer, verdict)

    def record_named(
        self,
        kind: str,
        name: str,
        model: str,
        route: str,
        started: float,
        answer: Answer,
        verdict: str,
    ) -> None:
        self.outcomes.append(
            Outcome(
                kind,
                name,
                model,
                route,
                started,
                self.now(),
                answer.status,
                verdict,
                "" if verdict == RIGHT else answer.message[:300],
            )
        )

    def judged(self, case: Case, answer: Answer) -> str:
        if answer.status == UNANSWERED:
            return LOST
        if same(self.references[case.name], answer):
            return RIGHT
        # An error other than the reference's: a good request's failure, or a
        # bad one's refusal by a stage that died before it could check it.
        return FAILED if not answer.ok else WRONG


async def _references(run: _Run, cases: list[Case]) -> None:
    """Each request's answer at rest, one at a time; a good one must be OK
    and a bad one refused, or the soak itself is wrong."""
    for case in cases:
        answer = await case.send(run.connections, {}, None)
        if answer.ok != case.good:
            raise AssertionError(f"reference of {case.name}: {answer.status} {answer.message}")
        run.references[case.name] = answer


def _traceparent() -> tuple[str, dict[str, str]]:
    trace_id = secrets.token_hex(16)
    return trace_id, {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}


async def _send(run: _Run, rng: random.Random, kind: str, cases: list[Case]) -> None:
    """One of `cases` (good or bad), answered as its reference."""
    case = rng.choice(cases)
    started = run.now()
    answer = await case.send(run.connections, {}, None)
    run.record(kind, case, started, answer, run.judged(case, answer))


async def _send_traced(run: _Run, rng: random.Random, good: list[Case]) -> None:
    case = rng.choice(good)
    trace_id, headers = _traceparent()
    run.traced.setdefault(case.route, []).append(trace_id)
    started = run.now()
    answer = await case.send(run.connections, headers, None)
    run.record("traced", case, started, answer, run.judged(case, answer))


async def _send_cancelled(run: _Run, rng: random.Random, good: list[Case]) -> None:
    case = rng.choice(good)
    started = run.now()
    task = asyncio.ensure_future(case.send(run.connections, {}, None))
    await asyncio.sleep(rng.uniform(0.0, CANCEL_WITHIN_S))
    if task.done():
        answer = task.result()
        run.record("cancelled", case, started, answer, run.judged(case, answer))
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        run.record("cancelled", case, started, Answer("CANCELLED"), CANCELLED)
        return
    answer = task.result()
    run.record("cancelled", case, started, answer, run.judged(case, answer))


async def _send_deadline(run: _Run, rng: random.Random, direct: list[Case]) -> None:
    case = rng.choice(direct)
    started = run.now()
    answer = await case.send(run.connections, {}, DEADLINE_US)
    verdict = run.judged(case, answer)
    if verdict == FAILED and EXPIRED_MESSAGE in answer.message.lower():
        verdict = EXPIRED
    run.record("deadline", case, started, answer, verdict)


def _drop_targets(stack: SoakStack) -> list[tuple[str, str, int, str]]:
    """(route, host, port, path) of each HTTP listener a dropped body goes to."""
    gateway_port = int(stack.gateway.url.rsplit(":", 1)[1])
    return [
        ("direct", "127.0.0.1", stack.server.endpoints.http_port, "/v2/models/embed/infer"),
        ("gateway", "127.0.0.1", gateway_port, "/v1/embeddings"),
        ("edge", "127.0.0.1", stack.edge.endpoints.http_port, "/v2/models/embed/infer"),
    ]


async def _send_dropped(
    run: _Run, rng: random.Random, targets: list[tuple[str, str, int, str]]
) -> None:
    """Headers promising a body (the tenant's key on them, so the edge lets
    it through to Triton), half of it, then the connection closes."""
    route, host, port, path = rng.choice(targets)
    body = b'{"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["x"]}]}'
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {TENANT_KEY}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    started = run.now()
    name = f"dropped mid-body {route} http"
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError as error:
        run.record_named("dropped", name, "", route, started, Answer(UNANSWERED, str(error)), LOST)
        return
    writer.write(head + body[: len(body) // 2])
    await writer.drain()
    await asyncio.sleep(rng.uniform(0.0, CANCEL_WITHIN_S))
    writer.close()
    await writer.wait_closed()
    run.record_named("dropped", name, "", route, started, Answer("DROPPED"), DROPPED)


async def _burst(run: _Run, case: Case, size: int) -> None:
    """`size` requests at once as the burst tenant: each answered as its
    reference, or refused for the quota."""
    started = run.now()
    answers = await asyncio.gather(*(case.send(run.connections, {}, None) for _ in range(size)))
    for answer in answers:
        verdict = run.judged(case, answer)
        if verdict == FAILED and answer.status in QUOTA_STATUSES:
            verdict = REFUSED
        run.record("burst", case, started, answer, verdict)


async def _reload(run: _Run, stage: str) -> None:
    """Loads a loaded stage again with a changed config, as an operator does."""
    at = run.now()
    status, detail = await asyncio.to_thread(reload_model, run.stack.server.http_url, stage)
    done = run.now() if status == 200 else None
    run.events.append(Event("reload", stage, at, done, detail or f"HTTP {status}"))


async def _kill(run: _Run, stage: str, asked: dict[str, int], recovery_s: float) -> None:
    """SIGKILL one stub of `stage`, then wait until the stubs are what the
    catalog asks and the server is ready again."""
    stubs = run.stack.stub_counts
    pid = min(python_stubs(run.stack.server.tritonserver_pid)[stage])
    at = run.now()
    os.kill(pid, signal.SIGKILL)
    while run.now() - at < recovery_s:
        await asyncio.sleep(0.5)
        if await asyncio.to_thread(lambda: stubs() == asked and run.stack.server.is_ready()):
            run.events.append(Event("kill", stage, at, run.now(), f"pid {pid}"))
            return
    run.events.append(Event("kill", stage, at, None, f"pid {pid}; stubs {stubs()}"))


async def _events(
    run: _Run, schedule: Schedule, asked: dict[str, int], burst: Case, recovery_s: float
) -> None:
    """The schedule's bursts, reloads and kills, each at its time; reloads
    and kills rotate over the Python-backend stages."""
    stages = sorted(asked)
    plan: list[tuple[float, Callable[[], Awaitable[None]]]] = []
    plan += [(at, partial(_burst, run, burst, BURST_SIZE)) for at in schedule.bursts]
    plan += [
        (at, partial(_reload, run, stages[index % len(stages)]))
        for index, at in enumerate(schedule.reloads)
    ]
    # Kills start elsewhere in the rotation than reloads.
    plan += [
        (
            at,
            partial(
                _kill, run, stages[(index + len(stages) // 2) % len(stages)], asked, recovery_s
            ),
        )
        for index, at in enumerate(schedule.kills)
    ]
    started: list[asyncio.Task[None]] = []
    for at, action in sorted(plan, key=lambda each: each[0]):
        await asyncio.sleep(max(0.0, at - run.now()))
        started.append(asyncio.ensure_future(action()))
    await asyncio.gather(*started)


async def _worker(
    run: _Run, rng: random.Random, senders: dict[str, Callable[[], Awaitable[None]]]
) -> None:
    kinds = list(WEIGHTS)
    weights = [WEIGHTS[kind] for kind in kinds]
    while not run.over():
        await senders[rng.choices(kinds, weights)[0]]()


def soak(
    stack: SoakStack, seconds: float, seed: int = 0, recovery_s: float = RECOVERY_S
) -> SoakResult:
    """The mix for `seconds`, then until the last kill's stubs are back."""
    return asyncio.run(_soak(stack, seconds, seed, recovery_s))


async def _soak(stack: SoakStack, seconds: float, seed: int, recovery_s: float) -> SoakResult:
    connections = Connections(stack)
    try:
        run = _Run(stack, connections, seconds)
        good, bad, burst = good_cases(), bad_cases(), burst_case()
        await _references(run, [*good, *bad, burst])
        asked = stack.stub_counts()
        schedule = Schedule(seconds)
        direct = [case for case in good if case.route == "direct"]
        targets = _drop_targets(stack)
        metrics = f"http://{stack.server.endpoints.metrics_address}/metrics"
        with ProcessWatch(
            stack.processes, lambda: len(run.outcomes), metrics, SAMPLE_INTERVAL_S
        ) as watch:
            run.start = time.monotonic()
            workers = []
            for index in range(WORKERS):
                rng = random.Random(seed * 1000 + index)
                senders: dict[str, Callable[[], Awaitable[None]]] = {
                    "good": partial(_send, run, rng, "good", good),
                    "traced": partial(_send_traced, run, rng, good),
                    "bad": partial(_send, run, rng, "bad", bad),
                    "cancelled": partial(_send_cancelled, run, rng, good),
                    "deadline": partial(_send_deadline, run, rng, direct),
                    "dropped": partial(_send_dropped, run, rng, targets),
                }
                workers.append(_worker(run, rng, senders))
            await asyncio.gather(_events(run, schedule, asked, burst, recovery_s), *workers)
        stage_models = {
            stage: model.name for model in stack.catalog.models for stage in model.own_stages
        }
        return SoakResult(
            seconds,
            schedule.warmup_s,
            run.outcomes,
            run.events,
            watch.samples(),
            asked,
            stack.stub_counts(),
            stage_models,
            await asyncio.to_thread(_traces_found, stack, run.traced),
        )
    finally:
        await connections.close()


def _traces_found(stack: SoakStack, traced: dict[str, list[str]]) -> dict[str, tuple[int, int]]:
    """Of each route's last TRACES_LOOKED_UP traced requests, how many traces
    Jaeger holds once the exporters' batches are in."""
    deadline = time.monotonic() + TRACE_EXPORT_S
    found: dict[str, tuple[int, int]] = {}
    for route, trace_ids in traced.items():
        looked = trace_ids[-TRACES_LOOKED_UP:]
        while True:
            count = sum(stack.jaeger.trace(trace_id) is not None for trace_id in looked)
            if count == len(looked) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        found[route] = (count, len(looked))
    return found
