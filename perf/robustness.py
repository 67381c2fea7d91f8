"""Robustness scenarios against a real server: overload, priority, a killed
stub process, fuzzed requests and shutdown. tests/test_robustness.py asserts
on them; this command runs them all and writes the robustness table:

    .venv/bin/python -m perf.robustness [--output perf/results/debian12-2core/robustness.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from perf.load import (
    BULK,
    INTERACTIVE,
    Outcome,
    closed_loop,
    open_loop,
    percentile_ms,
    request_texts,
    text_inputs,
)
from server.health import python_stubs
from server.process import RunningServer, running_server

# The promises the tests hold the server to (requests of 8 short texts unless
# said otherwise), measured on the 2-core reference machine with the load
# generator on the same cores.
DEADLINE_S = 5.0
OVERLOAD_SUCCESS_P99_S = 4.5
REJECTION_P99_S = 3.0  # the embedder's interactive queue timeout is 2 s
INTERACTIVE_P99_S = 2.5  # 1-text requests under bulk load at saturation
RECOVERY_S = 10.0
TEXTS_PER_REQUEST = 8
# Enough bulk clients that their queue outgrows one embedder batch (64 rows).
BULK_CLIENTS = 32
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
    outcomes = asyncio.run(open_loop(server.grpc_url, requests, rate, deadline_s=DEADLINE_S))
    return OverloadResult(multiple, rate, outcomes, server.is_ready())


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
    stubs_before: int
    stubs_after: int

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
        outcomes, killed_at, len(stubs), len(python_stubs(server_pid).get(model, []))
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
        inputs = []
        for name in ("INPUT_IDS", "ATTENTION_MASK"):
            tensor = grpcclient.InferInput(name, shape, "INT64")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        try:
            client.infer("embed_tokens", inputs, client_timeout=DEADLINE_S)
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
    exit_code: int
    exit_s: float


def shutdown(log_path: Path, in_flight: int = 16) -> ShutdownResult:
    """SIGTERM while bulk requests are in flight: they must all finish."""
    with running_server(log_path) as server:
        client_outcomes: list[str] = []

        def call(texts: list[str]) -> str:
            client = grpcclient.InferenceServerClient(server.grpc_url)
            try:
                client.infer("embed", text_inputs(texts), priority=BULK, client_timeout=60.0)
            except InferenceServerException as error:
                return str(error.status())
            return "OK"

        with ThreadPoolExecutor(max_workers=in_flight) as pool:
            futures = [
                pool.submit(call, texts) for texts in request_texts(in_flight, TEXTS_PER_REQUEST)
            ]
            time.sleep(0.5)
            stopped_at = time.monotonic()
            server.launcher.send_signal(signal.SIGTERM)
            client_outcomes = [future.result() for future in futures]
        exit_code = server.launcher.wait(timeout=60.0)
        exit_s = time.monotonic() - stopped_at
    return ShutdownResult(in_flight, client_outcomes.count("OK"), exit_code, exit_s)


def _latency_cell(outcomes: Sequence[Outcome]) -> str:
    if not outcomes:
        return "none"
    return f"p50 {percentile_ms(outcomes, 50):.0f} ms, p99 {percentile_ms(outcomes, 99):.0f} ms"


def _overload_row(result: OverloadResult, seconds: float) -> str:
    unavailable = [o for o in result.rejections if o.status == "StatusCode.UNAVAILABLE"]
    return (
        f"| overload {result.multiple:g}x | open loop, {result.rate_per_s:.1f} req/s for "
        f"{seconds:.0f} s, deadline {DEADLINE_S:.0f} s | sent {len(result.outcomes)}, "
        f"answered {len(result.outcomes)}: {dict(result.statuses)}; goodput "
        f"{len(result.successes) / seconds:.1f} req/s; successes {_latency_cell(result.successes)}; "
        f"rejections {_latency_cell(unavailable)}; ready after: {result.ready_after} |"
    )


def report(workdir: Path, seconds: float) -> list[str]:
    with running_server(workdir / "server.log") as server:
        capacity = measure_capacity(server)
        loads = [overload(server, capacity, multiple, seconds) for multiple in (2, 4)]
        ranked = priority(server, seconds)
        fault = kill_stub(server, capacity)
        fuzzed = fuzz(server)
    stopped = shutdown(workdir / "shutdown.log")
    bulk_ok = sum(outcome.ok for outcome in ranked.bulk)
    fault_failures = Counter(o.status for o in fault.outcomes if not o.ok)
    sent = (
        sum(len(result.outcomes) for result in loads)
        + len(ranked.interactive)
        + len(ranked.bulk_labelled_trickle)
        + len(fault.outcomes)
        + stopped.in_flight
    )
    lost = stopped.in_flight - stopped.answered_ok
    return [
        f"Requests of {TEXTS_PER_REQUEST} short texts unless said otherwise; the load "
        "generator shares the 2 cores with the server.",
        "",
        "| scenario | what was done | result |",
        "|---|---|---|",
        f"| capacity | closed loop, 8 clients | {capacity:.1f} req/s "
        f"({capacity * TEXTS_PER_REQUEST:.0f} texts/s) |",
        *(_overload_row(result, seconds) for result in loads),
        f"| priority | {BULK_CLIENTS} bulk clients (priority 2) saturating, plus two trickles of 1-text "
        f"requests at 2/s, one interactive (priority 1), one labelled bulk | interactive "
        f"{_latency_cell(ranked.interactive)}; the same trickle as bulk "
        f"{_latency_cell(ranked.bulk_labelled_trickle)}; bulk {bulk_ok / ranked.seconds:.1f} "
        "req/s |",
        f"| stub kill | SIGKILL to 1 of {fault.stubs_before} embedder stubs under load at half "
        f"capacity | sent {len(fault.outcomes)}, answered {len(fault.outcomes)}, failed "
        f"{dict(fault_failures)}; recovered (watchdog reload) {fault.recovery_s:.1f} s after "
        f"the kill; stubs after: {fault.stubs_after} |",
        f"| fuzz | {fuzzed.iterations} random bodies, shapes, datatypes, parameters | answers "
        f"{dict(fuzzed.answers)}; unanswered {fuzzed.transport_failures}; ready after: "
        f"{fuzzed.ready_after} |",
        f"| shutdown | SIGTERM with {stopped.in_flight} requests in flight | "
        f"{stopped.answered_ok} answered OK; exit code {stopped.exit_code} after "
        f"{stopped.exit_s:.1f} s |",
        f"| requests lost | all scenarios ({sent} load requests) | {lost} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per overload level")
    parser.add_argument(
        "--output", type=Path, default=Path("perf/results/debian12-2core/robustness.md")
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="robustness_") as workdir:
        lines = report(Path(workdir), args.seconds)
    table = "\n".join(lines)
    print(table)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(table + "\n")


if __name__ == "__main__":
    main()
