"""Two tenants on a cluster whose replicas run their edges (running_cluster
with a tenants file, as the chart's pods with `tenants.secret`): `steady`
sends within its quota while a replica is killed and while the replicas
restart in turn, and must see no failed request; `flood` sends beside it at
FLOOD_MULTIPLE times its quota, and the edges refuse what is beyond the
quota with RESOURCE_EXHAUSTED. Each pod's edge enforces the whole file, so
a tenant's quota is its rate per pod times the pods (docs/deployment.md).
tests/test_scale_out_tenants.py asserts it; perf/scale_out.py reports it."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from harness.edge import tenant_toml
from harness.load import Outcome
from harness.scale_out.cluster import Cluster
from harness.scale_out.scenarios import (
    PROBE_CLIENTS,
    REPLICAS,
    STEADY_SHARE_OF_TWO,
    Flood,
    loaded,
)

MODEL = "embed"
STEADY = "steady"
FLOOD = "flood"
KEYS = {STEADY: "scale-out-steady-key", FLOOD: "scale-out-flood-key"}
# The edge's answer to a tenant over its rate, as an Outcome's status.
REFUSED = str(grpc.StatusCode.RESOURCE_EXHAUSTED)
# steady's requests/s per pod. Its load is at most STEADY_SHARE_OF_ONE_POD
# of that, so that however the balancer splits it between the pods a fault
# leaves, with the retries of the requests the fault cut, it fits each
# pod's token bucket, which refills once a second: well within its quota.
STEADY_PER_POD = 10
STEADY_SHARE_OF_ONE_POD = 0.5
# flood's requests/s per pod: the least a tenants file allows. Its requests
# hold one text, so that what the edges let through adds little work beside
# steady's.
FLOOD_PER_POD = 1
FLOOD_MULTIPLE = 5.0
FLOOD_TEXTS_PER_REQUEST = 1
# The measurement of steady's rate: 2 replicas, closed loop.
MEASURE_S = 6.0
MEASURE_WARMUP_S = 2.0


def tenants_file() -> str:
    """Both tenants, interactive, with their rates per pod."""
    return tenant_toml(STEADY, [KEYS[STEADY]], [MODEL], rate=STEADY_PER_POD) + tenant_toml(
        FLOOD, [KEYS[FLOOD]], [MODEL], rate=FLOOD_PER_POD
    )


def steady_rate(cluster: Cluster) -> float:
    """steady's requests/s in the faults: STEADY_SHARE_OF_TWO of what 2
    replicas answered to its closed loop of PROBE_CLIENTS clients each (as
    the scenarios' steady load, so 2 replicas take it all while the third
    is out), at most STEADY_SHARE_OF_ONE_POD of its rate per pod."""
    (two,) = loaded(
        cluster,
        [cluster.replicas[:2]],
        MEASURE_S,
        MEASURE_WARMUP_S,
        PROBE_CLIENTS,
        KEYS[STEADY],
    )
    measured = STEADY_SHARE_OF_TWO * two.ok / two.seconds
    return min(measured, STEADY_SHARE_OF_ONE_POD * STEADY_PER_POD)


def flood() -> Flood:
    """FLOOD_MULTIPLE times flood's quota, its rate per pod times the pods."""
    return Flood(KEYS[FLOOD], FLOOD_MULTIPLE * FLOOD_PER_POD * REPLICAS, FLOOD_TEXTS_PER_REQUEST)


@dataclass(frozen=True)
class FloodFigures:
    """What became of the flood's requests."""

    sent: int
    answered: int
    refused: int  # RESOURCE_EXHAUSTED: over its quota at an edge
    failed: Counter[str]  # any other status
    allowance: int  # the most its quota lets through in that time

    @classmethod
    def of(cls, outcomes: Sequence[Outcome], restarts: int) -> FloodFigures:
        """`restarts`: edges started while it ran. Each pod's token bucket
        is full (FLOOD_PER_POD) when the flood begins or its edge starts,
        and refills FLOOD_PER_POD once a second: at most ceil(seconds) + 1
        times while the flood runs."""
        seconds = max(o.started_s for o in outcomes) - min(o.started_s for o in outcomes)
        allowance = FLOOD_PER_POD * (REPLICAS * (math.ceil(seconds) + 2) + restarts)
        statuses = Counter(outcome.status for outcome in outcomes)
        return cls(
            len(outcomes),
            statuses.pop("OK", 0),
            statuses.pop(REFUSED, 0),
            statuses,
            allowance,
        )
