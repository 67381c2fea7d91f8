"""Robustness scenarios against a real server: overload, priority, a killed
stub process, fuzzed requests and shutdown, and the promises they are held
to. tests/test_robustness.py asserts on them; perf/robustness.py runs them
all and writes the robustness table."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from harness.load import Outcome, closed_loop, open_loop, request_texts
from harness.priority import BULK, INTERACTIVE
from harness.requests import text_inputs, token_inputs
from harness.server import RunningServer, running_server
from server.health import python_stubs

# The promises the tests hold the server to (requests of 8 short texts unless
# said otherwise), measured on the 2-core reference machine with the load
# generator on the same cores.
DEADLINE_S = 5.0
# A refusal comes at the door (at once) or from a queue deadline: 2 s in
# the tokenizer's interactive queue, then 2 s in the embedder's.
REJECTION_P99_S = 4.5
# 1-text interactive requests under bulk load at saturation: within the
# client deadline, though the door may hold one small take of bulk work
# ahead of them.
INTERACTIVE_P99_S = 4.0
RECOVERY_S = 10.0
TEXTS_PER_REQUEST = 8
# Enough bulk clients that a deep bulk backlog waits at the door (the
# tokenizer's bulk queue) while the embedder is full.
BULK_CLIENTS = 64
EXPLICIT_REJECTIONS = {"StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED"}


def measure_capacity(server: RunningServer, seconds: float = 10.0) -> float:
    """Requests/s the server completes with 8 clients always waiting on it."""
    outcomes = asyncio.run(
        closed_loop(server.grpc_url, request_texts(2000, TEXTS_PER_REQUEST), 8, seconds)
    )
    return sum(outcome.ok for outcome in outcomes) / seconds


@dataclass(frozen=True)
class OverloadResult:
    multiple: float
    rate_per_s: float
    outcomes: list[Outcome]
    ready_after: bool
    tokenized: int  # requests the tokenizer answered meanwhile

    @property
    def wasted_share(self) -> float:
        """Share of the tokenized requests that were not answered OK."""
        ok = len(self.successes)
        return (self.tokenized - ok) / self.tokenized if self.tokenized else 0.0

    @property
    def statuses(self) -> Counter[str]:
        return Counter(outcome.status for outcome in self.outcomes)

    @property
    def successes(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.ok]

    @property
    def rejections(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if not outcome.ok]


def overload(
    server: RunningServer, capacity_per_s: float, multiple: float, seconds: float = 20.0
) -> OverloadResult:
    rate = capacity_per_s * multiple
    requests = request_texts(int(rate * seconds), TEXTS_PER_REQUEST)
    before = requests_answered(server, "tokenizer")
    outcomes = asyncio.run(open_loop(server.grpc_url, requests, rate, deadline_s=DEADLINE_S))
    tokenized = _settled(lambda: requests_answered(server, "tokenizer")) - before
    return OverloadResult(multiple, rate, outcomes, server.is_ready(), tokenized)


def requests_answered(server: RunningServer, model: str) -> int:
    """Requests `model` has answered so far, with an output or an error
    (Triton counts a Python model's error response as a success)."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    (stats,) = client.get_inference_statistics(model, as_json=True)["model_stats"]
    counts = stats["inference_stats"]
    return sum(int(counts.get(kind, {}).get("count", 0)) for kind in ("success", "fail"))


def _settled(count: Callable[[], int], interval_s: float = 1.0) -> int:
    """A count once it stops moving: requests their clients gave up on may
    still be in the server."""
    previous, current = -1, count()
    while current != previous:
        time.sleep(interval_s)
        previous, current = current, count()
    return current


# Closed-loop client counts whose best throughput is the level's peak.
PEAK_CONCURRENCY = (4, 8, 16)
# Client deadlines: an interactive client gives up after DEADLINE_S, a bulk
# (indexing) client waits as long as the bulk queue's own deadline.
LEVEL_DEADLINE_S = {INTERACTIVE: DEADLINE_S, BULK: 30.0}


@dataclass(frozen=True)
class SheddingRun:
    """One overload level of one priority level, with what the tokenizer
    did: every request it answered was tokenized (or refused for bad input,
    which these are not), so tokenized but not answered OK is waste."""

    multiple: float
    rate_per_s: float
    outcomes: list[Outcome]
    tokenized: int

    @property
    def ok(self) -> int:
        return sum(outcome.ok for outcome in self.outcomes)

    @property
    def refused(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if not outcome.ok]

    @property
    def wasted_share(self) -> float:
        """Share of the tokenized requests that were not answered OK."""
        return (self.tokenized - self.ok) / self.tokenized if self.tokenized else 0.0


@dataclass(frozen=True)
class SheddingResult:
    level: int
    peak_per_s: float  # best closed-loop requests/s at this level
    peak_concurrency: int
    runs: list[SheddingRun]
    seconds: float


def shedding(
    server: RunningServer, level: int, multiples: tuple[float, ...], seconds: float
) -> SheddingResult:
    """The level's closed-loop peak, then open-loop overload at each multiple
    of it, counting the requests the tokenizer spent work on."""
    deadline = LEVEL_DEADLINE_S[level]
    texts = request_texts(4000, TEXTS_PER_REQUEST)
    peaks = {
        concurrency: sum(
            outcome.ok
            for outcome in asyncio.run(
                closed_loop(server.grpc_url, texts, concurrency, seconds, level, deadline)
            )
        )
        / seconds
        for concurrency in PEAK_CONCURRENCY
    }
    peak_concurrency = max(peaks, key=lambda concurrency: peaks[concurrency])
    peak = peaks[peak_concurrency]
    runs = []
    for multiple in multiples:
        rate = peak * multiple
        requests = request_texts(int(rate * seconds), TEXTS_PER_REQUEST)
        before = requests_answered(server, "tokenizer")
        outcomes = asyncio.run(open_loop(server.grpc_url, requests, rate, level, deadline))
        tokenized = _settled(lambda: requests_answered(server, "tokenizer")) - before
        runs.append(SheddingRun(multiple, rate, outcomes, tokenized))
    return SheddingResult(level, peak, peak_concurrency, runs, seconds)


@dataclass(frozen=True)
class PriorityResult:
    interactive: list[Outcome]
    bulk_labelled_trickle: list[Outcome]
    bulk: list[Outcome]
    seconds: float


def priority(
    server: RunningServer, seconds: float = 20.0, trickle_per_s: float = 2.0
) -> PriorityResult:
    """Bulk clients saturate the server while two identical trickles of
    1-text requests arrive, one labelled interactive and one bulk."""
    trickle = request_texts(int(trickle_per_s * (seconds - 4)), 1)

    async def run() -> PriorityResult:
        bulk = asyncio.create_task(
            closed_loop(
                server.grpc_url,
                request_texts(4000, TEXTS_PER_REQUEST),
                BULK_CLIENTS,
                seconds,
                priority=BULK,
            )
        )
        await asyncio.sleep(2.0)
        interactive, labelled_bulk = await asyncio.gather(
            open_loop(server.grpc_url, trickle, trickle_per_s, INTERACTIVE, DEADLINE_S * 4),
            open_loop(server.grpc_url, trickle, trickle_per_s, BULK, DEADLINE_S * 4),
        )
        return PriorityResult(interactive, labelled_bulk, await bulk, seconds)

    return asyncio.run(run())


@dataclass(frozen=True)
class FaultResult:
    outcomes: list[Outcome]
    killed_at_s: float
    stubs_before: tuple[int, ...]  # the model's stub pids
    stubs_after: tuple[int, ...]

    @property
    def recovery_s(self) -> float:
        """From the kill to the first request after which all succeeded."""
        after_kill = sorted(
            (o for o in self.outcomes if o.started_s >= self.killed_at_s),
            key=lambda o: o.started_s,
        )
        last_failure = max((i for i, o in enumerate(after_kill) if not o.ok), default=-1)
        if last_failure + 1 >= len(after_kill):
            return float("inf")
        return after_kill[last_failure + 1].started_s - self.killed_at_s


def kill_stub(
    server: RunningServer,
    capacity_per_s: float,
    model: str = "embedder",
    seconds: float = 16.0,
) -> FaultResult:
    """Kills one stub process of `model` under load at half capacity."""
    rate = capacity_per_s / 2
    requests = request_texts(int(rate * seconds), TEXTS_PER_REQUEST)
    server_pid = server.tritonserver_pid
    stubs = python_stubs(server_pid)[model]

    async def run() -> tuple[list[Outcome], float]:
        load = asyncio.create_task(
            open_loop(server.grpc_url, requests, rate, deadline_s=DEADLINE_S)
        )
        await asyncio.sleep(3.0)
        killed_at = time.monotonic()
        os.kill(stubs[0], signal.SIGKILL)
        return await load, killed_at

    outcomes, killed_at = asyncio.run(run())
    return FaultResult(
        outcomes, killed_at, tuple(stubs), tuple(python_stubs(server_pid).get(model, []))
    )


@dataclass(frozen=True)
class FuzzResult:
    iterations: int
    answers: Counter[str]  # HTTP status codes or gRPC status names
    server_errors: list[str]  # bodies of HTTP 5xx answers
    transport_failures: int  # no answer at all
    ready_after: bool


_DATATYPES = ["BYTES", "INT64", "INT32", "FP32", "FP16", "UINT8", "BOOL"]
_PARAMETER_VALUES: list[object] = [
    "float16",
    "ubinary",
    "float64",
    "",
    0,
    -1,
    384,
    385,
    10**12,
    True,
    False,
    3.5,
    None,
    [],
    {},
]


def _fuzz_body(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 256))
    shape = [rng.randrange(0, 4) for _ in range(rng.randrange(0, 4))]
    count = int(np.prod(shape)) if shape else 1
    data: list[object] = [
        rng.choice(["text", "", "\u00e9\u6f22", 1, 2.5, None, True]) for _ in range(count)
    ]
    body: dict[str, object] = {
        "inputs": [
            {
                "name": rng.choice(["TEXT", "TEXT", "INPUT_IDS", "nope"]),
                "datatype": rng.choice(_DATATYPES),
                "shape": shape,
                "data": data,
            }
        ],
        "parameters": {
            rng.choice(["dtype", "dimensions", "normalize", "x"]): rng.choice(_PARAMETER_VALUES)
            for _ in range(rng.randrange(0, 3))
        },
    }
    if kind == 2:
        del body["inputs"]
    text = json.dumps(body)
    if kind == 3:
        text = text[: rng.randrange(len(text))]
    return text.encode()


def fuzz(server: RunningServer, iterations: int = 300, seed: int = 0) -> FuzzResult:
    """Random bodies, shapes, datatypes and parameters sent to `embed` over
    HTTP, then random gRPC tensors; every request must get an answer."""
    rng = random.Random(seed)
    answers: Counter[str] = Counter()
    server_errors: list[str] = []
    failures = 0
    for _ in range(iterations):
        request = urllib.request.Request(
            f"http://{server.http_url}/v2/models/embed/infer",
            data=_fuzz_body(rng),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=DEADLINE_S) as reply:
                answers[str(reply.status)] += 1
        except urllib.error.HTTPError as error:
            answers[str(error.code)] += 1
            if error.code >= 500:
                server_errors.append(error.read().decode(errors="replace"))
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            failures += 1
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for _ in range(iterations // 3):
        shape = [rng.randrange(1, 3), rng.randrange(1, 3)]
        array = np.frombuffer(rng.randbytes(int(np.prod(shape)) * 8), dtype=np.int64).reshape(shape)
        try:
            client.infer(
                "embed_tokens", token_inputs(grpcclient, array, array), client_timeout=DEADLINE_S
            )
            answers["OK"] += 1
        except InferenceServerException as error:
            answers[str(error.status())] += 1
    return FuzzResult(
        iterations + iterations // 3, answers, server_errors, failures, server.is_ready()
    )


@dataclass(frozen=True)
class ShutdownResult:
    in_flight: int
    answered_ok: int
    # Answered OK after SIGTERM: requests the drain held open, the proof
    # that the signal came while work was in flight.
    answered_after_signal: int
    exit_code: int
    exit_s: float


def _tokenizer_answers(server: RunningServer) -> int:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    (stats,) = client.get_inference_statistics("tokenizer", as_json=True)["model_stats"]
    return int(stats["inference_stats"].get("success", {}).get("count", 0))


def shutdown(log_path: Path, in_flight: int = 16) -> ShutdownResult:
    """SIGTERM while bulk requests are in flight: they must all finish. The
    signal goes out as soon as the server has answered the first of them
    through its first stage, so the rest are inside it."""
    with running_server(log_path) as server:
        signalled = threading.Event()

        def call(texts: list[str]) -> tuple[str, bool]:
            client = grpcclient.InferenceServerClient(server.grpc_url)
            try:
                client.infer(
                    "embed", text_inputs(grpcclient, texts), priority=BULK, client_timeout=60.0
                )
            except InferenceServerException as error:
                return str(error.status()), signalled.is_set()
            return "OK", signalled.is_set()

        before = _tokenizer_answers(server)
        with ThreadPoolExecutor(max_workers=in_flight) as pool:
            futures = [
                pool.submit(call, texts) for texts in request_texts(in_flight, TEXTS_PER_REQUEST)
            ]
            deadline = time.monotonic() + DEADLINE_S
            while _tokenizer_answers(server) == before and time.monotonic() < deadline:
                time.sleep(0.01)
            stopped_at = time.monotonic()
            signalled.set()
            server.launcher.send_signal(signal.SIGTERM)
            outcomes = [future.result() for future in futures]
        exit_code = server.launcher.wait(timeout=60.0)
        exit_s = time.monotonic() - stopped_at
    ok = [after for status, after in outcomes if status == "OK"]
    return ShutdownResult(in_flight, len(ok), sum(ok), exit_code, exit_s)
