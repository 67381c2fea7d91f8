"""One model flooded while another gets steady load, both served by one
tritonserver: each model has its own stages and queues, so the flood is
refused at its own door while the steady model answers every request.

Rates follow capacities measured first, in the same run: the steady model
gets STEADY_SHARE of what it answered alone, the flooded one FLOOD_MULTIPLE
of what it answered alone."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from harness.load import Outcome, closed_loop, open_loop, request_texts

TEXTS_PER_REQUEST = 8
CAPACITY_CLIENTS = 4
# The steady model's load: well inside what it answers alone, since the two
# models' stages share the machine's cores during the flood.
STEADY_SHARE = 0.25
FLOOD_MULTIPLE = 3.0


@dataclass(frozen=True)
class Isolation:
    steady_model: str
    flood_model: str
    steady_rate: float  # requests/s
    flood_rate: float
    alone: list[Outcome]  # the steady model's, with no flood
    during: list[Outcome]  # the steady model's, during the flood
    flood: list[Outcome]


def capacity(url: str, model: str, seconds: float) -> float:
    """Requests/s `model` answers to CAPACITY_CLIENTS closed-loop clients."""
    requests = request_texts(64, TEXTS_PER_REQUEST)
    outcomes = asyncio.run(closed_loop(url, requests, CAPACITY_CLIENTS, seconds, model=model))
    return sum(outcome.ok for outcome in outcomes) / seconds


async def _both(
    url: str, steady: tuple[str, float], flood: tuple[str, float], seconds: float
) -> tuple[list[Outcome], list[Outcome]]:
    (steady_model, steady_rate), (flood_model, flood_rate) = steady, flood
    steady_requests = request_texts(max(1, int(steady_rate * seconds)), TEXTS_PER_REQUEST)
    flood_requests = request_texts(max(1, int(flood_rate * seconds)), TEXTS_PER_REQUEST)
    during, flooded = await asyncio.gather(
        open_loop(url, steady_requests, steady_rate, model=steady_model),
        open_loop(url, flood_requests, flood_rate, model=flood_model),
    )
    return during, flooded


def isolation(url: str, steady_model: str, flood_model: str, seconds: float) -> Isolation:
    steady_rate = STEADY_SHARE * capacity(url, steady_model, seconds / 2)
    flood_rate = FLOOD_MULTIPLE * capacity(url, flood_model, seconds / 2)
    requests = request_texts(max(1, int(steady_rate * seconds)), TEXTS_PER_REQUEST)
    alone = asyncio.run(open_loop(url, requests, steady_rate, model=steady_model))
    during, flood = asyncio.run(
        _both(url, (steady_model, steady_rate), (flood_model, flood_rate), seconds)
    )
    return Isolation(steady_model, flood_model, steady_rate, flood_rate, alone, during, flood)
