"""Workload and load generators for `embed` over gRPC (asyncio): short
English texts from Python's pydoc_data, a closed loop to find capacity, an
open loop (fixed arrival rate, whatever the server does) to overload it.
Every request ends in an Outcome, so sent == answered can be checked."""

from __future__ import annotations

import asyncio
import pydoc_data.topics
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from harness.priority import INTERACTIVE
from harness.requests import text_inputs


def short_texts(count: int) -> list[str]:
    """Deterministic English sentences of 8 to 40 words."""
    prose = " ".join(pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics))
    sentences = (" ".join(s.split()) for s in re.split(r"(?<=[.!?])\s+", prose))
    picked = [s for s in sentences if 8 <= len(s.split()) <= 40 and s.isascii()]
    return picked[:count]


def request_texts(count: int, per_request: int) -> list[list[str]]:
    """`count` requests of `per_request` short texts each, cycling the texts."""
    texts = short_texts(2000)
    return [
        [texts[(index * per_request + offset) % len(texts)] for offset in range(per_request)]
        for index in range(count)
    ]


@dataclass(frozen=True)
class Outcome:
    status: str  # "OK", or the gRPC status the server or the client deadline gave
    started_s: float  # time.monotonic() when the request was sent
    latency_s: float
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "OK"


async def send(
    client: grpcaio.InferenceServerClient,
    texts: Sequence[str],
    priority: int,
    deadline_s: float,
    model: str = "embed",
    headers: dict[str, str] | None = None,
) -> Outcome:
    started = time.monotonic()
    try:
        await client.infer(
            model,
            text_inputs(grpcclient, texts),
            priority=priority,
            client_timeout=deadline_s,
            headers=headers,
        )
    except InferenceServerException as error:
        return Outcome(str(error.status()), started, time.monotonic() - started, error.message())
    return Outcome("OK", started, time.monotonic() - started)


async def open_loop(
    url: str,
    requests: Sequence[Sequence[str]],
    rate_per_s: float,
    priority: int = INTERACTIVE,
    deadline_s: float = 5.0,
    model: str = "embed",
    headers: dict[str, str] | None = None,
) -> list[Outcome]:
    """Sends requests[i] to `model` at time i / rate_per_s, never waiting
    for answers; `headers` go with each (a tenant's key)."""
    async with grpcaio.InferenceServerClient(url) as client:
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks = []
        for index, texts in enumerate(requests):
            await asyncio.sleep(max(0.0, start + index / rate_per_s - loop.time()))
            tasks.append(
                asyncio.create_task(send(client, texts, priority, deadline_s, model, headers))
            )
        return list(await asyncio.gather(*tasks))


async def closed_loop(
    url: str,
    requests: Sequence[Sequence[str]],
    concurrency: int,
    seconds: float,
    priority: int = INTERACTIVE,
    deadline_s: float = 30.0,
    model: str = "embed",
    headers: dict[str, str] | None = None,
) -> list[Outcome]:
    """`concurrency` workers, each sending its next request to `model` when
    one returns."""
    async with grpcaio.InferenceServerClient(url) as client:
        stop_at = time.monotonic() + seconds
        outcomes: list[Outcome] = []

        async def worker(offset: int) -> None:
            index = offset
            while time.monotonic() < stop_at:
                texts = requests[index % len(requests)]
                outcomes.append(await send(client, texts, priority, deadline_s, model, headers))
                index += concurrency

        await asyncio.gather(*(worker(offset) for offset in range(concurrency)))
        return outcomes


def percentile_ms(outcomes: Sequence[Outcome], percent: float) -> float:
    latencies = [outcome.latency_s for outcome in outcomes]
    return float(np.percentile(latencies, percent)) * 1000 if latencies else float("nan")
