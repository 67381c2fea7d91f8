"""Two tenants through the edge: B sends steady interactive load while A
floods past its quota, then while A sends bulk work within its quota.

Rates follow the capacity measured first, in the same run, straight to
Triton: A's quota and B's steady rate are QUOTA_SHARE of it; the flood is
FLOOD_MULTIPLE times A's quota; A's bulk tenant may send the rest of the
capacity (all of it less B's rate) and does."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from harness.edge import tenant_toml
from harness.load import Outcome, closed_loop, open_loop, request_texts

TEXTS_PER_REQUEST = 8
CAPACITY_CLIENTS = 4
QUOTA_SHARE = 0.3
FLOOD_MULTIPLE = 5.0
# A bulk request waits behind interactive ones for as long as its queue
# allows (the tokenizer's bulk deadline, 30 s); the client waits as long.
BULK_DEADLINE_S = 30.0
MODEL = "embed"
KEYS = {"a": "tenant-a-key", "a-bulk": "tenant-a-bulk-key", "b": "tenant-b-key"}


@dataclass(frozen=True)
class Rates:
    capacity: float  # requests/s one server answered to CAPACITY_CLIENTS clients
    quota: float  # A's requests/s, and B's steady rate

    @property
    def flood(self) -> float:
        return FLOOD_MULTIPLE * self.quota

    @property
    def bulk(self) -> float:
        return self.capacity - self.quota


@dataclass(frozen=True)
class Fairness:
    rates: Rates
    seconds: float
    alone: list[Outcome]  # B alone
    flooded: list[Outcome]  # B while A floods
    flood: list[Outcome]  # A's flood
    beside_bulk: list[Outcome]  # B while A sends bulk work
    bulk: list[Outcome]  # A's bulk work


def measure_rates(triton_grpc_url: str, seconds: float) -> Rates:
    requests = request_texts(64, TEXTS_PER_REQUEST)
    outcomes = asyncio.run(
        closed_loop(triton_grpc_url, requests, CAPACITY_CLIENTS, seconds, model=MODEL)
    )
    capacity = sum(outcome.ok for outcome in outcomes) / seconds
    return Rates(capacity, QUOTA_SHARE * capacity)


def tenants_file(rates: Rates) -> str:
    """A interactive at its quota, A's bulk tenant at the rest of the
    capacity, B interactive with room to spare; none bounded in flight below
    what the loads send."""
    quota = max(1, round(rates.quota))
    return "".join(
        [
            tenant_toml("a", [KEYS["a"]], [MODEL], rate=quota, in_flight=1000),
            tenant_toml(
                "a-bulk",
                [KEYS["a-bulk"]],
                [MODEL],
                rate=max(1, round(rates.bulk)),
                priority="bulk",
                in_flight=1000,
            ),
            tenant_toml("b", [KEYS["b"]], [MODEL], rate=10 * quota, in_flight=1000),
        ]
    )


def _load(
    url: str, tenant: str, rate: float, seconds: float, deadline_s: float = 5.0
) -> asyncio.Future[list[Outcome]]:
    requests = request_texts(max(1, int(rate * seconds)), TEXTS_PER_REQUEST)
    headers = {"authorization": f"Bearer {KEYS[tenant]}"}
    return asyncio.ensure_future(
        open_loop(url, requests, rate, deadline_s=deadline_s, model=MODEL, headers=headers)
    )


async def _together(
    url: str, loads: Sequence[tuple[str, float, float]], seconds: float
) -> list[list[Outcome]]:
    """Each (tenant, rate, deadline) load at once, for `seconds`."""
    return list(
        await asyncio.gather(
            *(_load(url, tenant, rate, seconds, deadline) for tenant, rate, deadline in loads)
        )
    )


def fairness(edge_grpc_url: str, rates: Rates, seconds: float) -> Fairness:
    steady = ("b", rates.quota, 5.0)
    (alone,) = asyncio.run(_together(edge_grpc_url, [steady], seconds))
    flooded, flood = asyncio.run(
        _together(edge_grpc_url, [steady, ("a", rates.flood, 5.0)], seconds)
    )
    beside_bulk, bulk = asyncio.run(
        _together(edge_grpc_url, [steady, ("a-bulk", rates.bulk, BULK_DEADLINE_S)], seconds)
    )
    return Fairness(rates, seconds, alone, flooded, flood, beside_bulk, bulk)
