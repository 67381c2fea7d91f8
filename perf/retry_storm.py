"""Goodput under a crowd of clients, side by side in one run: the server's peak (the best of 8
and 16 closed-loop clients), then 160 closed-loop clients three ways: the client library with
its retries on (the default policy), the same with retries off, each refusal sent again at once
(what callers did before the library retried), and the OpenAI SDK through the gateway with its
default retries; and, for the choice of the default backoff cap, the library with twice that
cap. Each client sends requests of 8 short texts, the next as soon as its last call
ended, answered or refused.

    PYTHONPATH=. .venv/bin/python -m perf.retry_storm --output perf/results/<machine>/retry_storm.md

The server side (tritonserver, its stubs and the gateway) runs on the first CPU, the load (this
process) on the second, so refusals cost the server only its own CPU. About 3 minutes at the
defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import openai
import tritonclient.grpc as grpcclient
from embedding_client import NO_RETRIES, AsyncEmbeddingClient, RetryPolicy, UnavailableError
from embedding_client.retry import DEFAULT_RETRY
from model_common.processor import this_processor
from tritonclient.utils import InferenceServerException

from harness.gateway import RunningGateway, running_gateway
from harness.load import request_texts
from harness.server import RunningServer, running_server
from perf.process_cpu import cpu_seconds
from perf.report_command import write_report
from server.health import child_pids
from server.paths import TOKENIZER_JSON

COMMAND = "PYTHONPATH=. .venv/bin/python -m perf.retry_storm"
# The shipped server's MiniLM entry point, which the gateway serves by the same name.
MODEL = "embed"
TEXTS_PER_REQUEST = 8
PEAK_LEVELS = (8, 16)
CROWD = 160
SERVER_CPU, LOAD_CPU = 0, 1
# The default policy with twice its backoff cap: what the default's cap is chosen against.
SLOWER = replace(DEFAULT_RETRY, max_backoff_s=2 * DEFAULT_RETRY.max_backoff_s)
# A call's whole time, retries included, as the library's default deadline bounds its retries.
CALL_TIMEOUT_S = 60.0


@dataclass
class Tally:
    """What the clients saw: calls answered, calls that ended refused, and how long those took."""

    answered: int = 0
    refused: int = 0
    refused_after_s: list[float] = field(default_factory=list)
    # Refusals each sent again at once (retries off only), each one a request the server refused.
    resent: int = 0


@dataclass(frozen=True)
class Run:
    label: str
    clients: int
    seconds: float
    tally: Tally
    server_refusals: float  # `embed` requests Triton refused during the run
    server_cpu_s: float  # tritonserver, its stubs and the gateway

    @property
    def goodput(self) -> float:
        return self.tally.answered / self.seconds


# One call of a client: returns when answered; raises `refusal` when the call ends refused.
Call = Callable[[list[str]], Awaitable[object]]


async def _closed_loop(
    calls: Sequence[Call], refusal: type[Exception], seconds: float, resend_at_once: bool
) -> Tally:
    """Each call in its own loop for `seconds`: the next request when the last ended, or the
    same one again at once after a refusal where `resend_at_once`."""
    requests = request_texts(64, TEXTS_PER_REQUEST)
    tally = Tally()
    deadline = time.monotonic() + seconds

    async def drive(index: int, call: Call) -> None:
        position = index
        while time.monotonic() < deadline:
            began = time.monotonic()
            try:
                await call(requests[position % len(requests)])
            except refusal:
                if resend_at_once:
                    tally.resent += 1
                    continue
                tally.refused += 1
                tally.refused_after_s.append(time.monotonic() - began)
            else:
                tally.answered += 1
            position += 1

    await asyncio.gather(*(drive(index, call) for index, call in enumerate(calls)))
    return tally


async def _library(url: str, clients: int, policy: RetryPolicy, seconds: float) -> Tally:
    opened = [
        AsyncEmbeddingClient(url, "grpc", max_in_flight=1, timeout_s=CALL_TIMEOUT_S, retry=policy)
        for _ in range(clients)
    ]
    try:
        calls = [client.embed for client in opened]
        resend = policy == NO_RETRIES
        return await _closed_loop(calls, UnavailableError, seconds, resend_at_once=resend)
    finally:
        await asyncio.gather(*(client.close() for client in opened))


async def _openai_sdk(gateway: RunningGateway, clients: int, seconds: float) -> Tally:
    opened = [
        openai.AsyncOpenAI(base_url=gateway.base_url, api_key="unused", timeout=CALL_TIMEOUT_S)
        for _ in range(clients)
    ]

    def call(client: openai.AsyncOpenAI) -> Call:
        return lambda texts: client.embeddings.create(
            model=MODEL, input=texts, encoding_format="base64"
        )

    try:
        calls = [call(client) for client in opened]
        return await _closed_loop(calls, openai.APIStatusError, seconds, resend_at_once=False)
    finally:
        await asyncio.gather(*(client.close() for client in opened))


def _server_pids(server: RunningServer, gateway: RunningGateway) -> list[int]:
    triton = server.tritonserver_pid
    return [triton, *child_pids(triton), gateway.pid]


def _failures(server: RunningServer) -> int:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        (stats,) = client.get_inference_statistics("embed", as_json=True)["model_stats"]
    return int(stats["inference_stats"]["fail"].get("count", 0))


def _failures_per_refusal(server: RunningServer) -> int:
    """How many failures Triton's statistics count for one refused `embed` request (an ensemble
    counts its failed step's too): one request refused on purpose, an unknown prompt."""
    before = _failures(server)
    text = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"a text"]], dtype=np.object_))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        try:
            client.infer(MODEL, [text], parameters={"prompt_name": "no-such-prompt"})
        except InferenceServerException:
            pass
    return max(1, _failures(server) - before)


def _measure(
    label: str,
    clients: int,
    seconds: float,
    server: RunningServer,
    gateway: RunningGateway,
    load: Callable[[], Awaitable[Tally]],
) -> Run:
    """One run of `load`, with the server's refusals and CPU meanwhile."""
    per_refusal = _failures_per_refusal(server)
    pids = _server_pids(server, gateway)
    cpu_before = sum(cpu_seconds(pid) for pid in pids)
    failures_before = _failures(server)
    began = time.monotonic()
    tally = asyncio.run(load())
    elapsed = time.monotonic() - began
    return Run(
        label,
        clients,
        elapsed,
        tally,
        (_failures(server) - failures_before) / per_refusal,
        sum(cpu_seconds(pid) for pid in pids) - cpu_before,
    )


@contextmanager
def _on_cpu(cpu: int) -> Iterator[None]:
    """This process, and what it starts meanwhile, on `cpu` alone."""
    every = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, every)


def measure(seconds: float, workdir: Path) -> list[Run]:
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs 2 CPUs: one for the server, one for the load")
    with ExitStack() as stack:
        with _on_cpu(SERVER_CPU):
            server = stack.enter_context(running_server(workdir / "tritonserver.log"))
            gateway = stack.enter_context(
                running_gateway(server.grpc_url, [(MODEL, TOKENIZER_JSON)], workdir / "gateway.log")
            )
        with _on_cpu(LOAD_CPU):
            url = server.grpc_url

            def run(label: str, clients: int, load: Callable[[], Awaitable[Tally]]) -> Run:
                return _measure(label, clients, seconds, server, gateway, load)

            runs = [
                run(
                    f"peak: library, retries off, {level} clients",
                    level,
                    lambda level=level: _library(url, level, NO_RETRIES, seconds),
                )
                for level in PEAK_LEVELS
            ]
            runs += [
                run(
                    "library, retries on (the default policy)",
                    CROWD,
                    lambda: _library(url, CROWD, DEFAULT_RETRY, seconds),
                ),
                run(
                    f"library, retries on, backoff cap {SLOWER.max_backoff_s:g} s",
                    CROWD,
                    lambda: _library(url, CROWD, SLOWER, seconds),
                ),
                run(
                    "library, retries off, each refusal sent again at once",
                    CROWD,
                    lambda: _library(url, CROWD, NO_RETRIES, seconds),
                ),
                run(
                    f"OpenAI SDK {openai.__version__} (its default retries), through the gateway",
                    CROWD,
                    lambda: _openai_sdk(gateway, CROWD, seconds),
                ),
            ]
    return runs


def render(runs: Sequence[Run], command: str, seconds: float) -> str:
    peak = max(runs[: len(PEAK_LEVELS)], key=lambda run: run.goodput)
    lines = [
        "# Goodput under a crowd of clients: retries with backoff against refusals at once",
        "",
        f"`{command}`",
        "",
        f"Processor: {this_processor().describe()}.",
        "",
        f"The shipped server (MiniLM, {MODEL}) and the gateway on CPU {SERVER_CPU}, the load on "
        f"CPU {LOAD_CPU}. Requests of {TEXTS_PER_REQUEST} short texts over gRPC (the OpenAI SDK: "
        f"HTTP to the gateway, which calls Triton over gRPC), closed loop: each client sends its "
        f"next request as soon as its last call ended, answered or refused; {seconds:g} s per "
        "run. Goodput: calls answered per second, against the peak (the best of "
        f"{' and '.join(map(str, PEAK_LEVELS))} clients). Refusals at the server: `embed` "
        "requests Triton refused (queue full) during the run, its statistics' failures over "
        "the failures it counts for one refused request (the ensemble's and its step's, "
        "measured before each run by one request refused on purpose). Server CPU: "
        "tritonserver, its stubs "
        "and the gateway, CPU seconds per second of run.",
        "",
        "| clients | calls | goodput req/s | of peak | calls ended refused | refused calls ended after (p50 / max s) | refusals at the server /s | server CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        after = sorted(run.tally.refused_after_s)
        ended = f"{after[len(after) // 2]:.2f} / {after[-1]:.2f}" if after else "none"
        refused = (
            f"{run.tally.resent} (each sent again at once)"
            if run.tally.resent
            else str(run.tally.refused)
        )
        lines.append(
            f"| {run.clients} | {run.label} | {run.goodput:.1f} | {run.goodput / peak.goodput:.2f} "
            f"| {refused} | {ended} | {run.server_refusals / run.seconds:.0f} | "
            f"{run.server_cpu_s / run.seconds:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="the report (markdown)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per run")
    args = parser.parse_args(arguments)
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    with tempfile.TemporaryDirectory(prefix="perf_retry_storm_") as work:
        runs = measure(args.seconds, Path(work))
    write_report(args.output, render(runs, f"{COMMAND} {shlex.join(arguments)}", args.seconds))


if __name__ == "__main__":
    main()
