"""The robustness report's tenants section (perf/robustness.py): fairness
between tenants at the edge, one tenant flooding while another sends steady
interactive load (harness/fairness.py). One tritonserver (the shipped
models), Envoy in front of it with a tenants file written from the capacity
measured first (server/edge/).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from model_common.processor import this_processor

from harness.edge import running_edge
from harness.fairness import (
    BULK_DEADLINE_S,
    FLOOD_MULTIPLE,
    QUOTA_SHARE,
    TEXTS_PER_REQUEST,
    Fairness,
    fairness,
    measure_rates,
    tenants_file,
)
from harness.load import Outcome, percentile_ms
from harness.server import running_server


def _row(phase: str, tenant: str, rate: float, outcomes: list[Outcome], seconds: float) -> str:
    ok = [outcome for outcome in outcomes if outcome.ok]
    refused = Counter(outcome.status for outcome in outcomes if not outcome.ok)
    return (
        f"| {phase} | {tenant} | {rate:.1f} | {len(outcomes)} | {len(ok) / max(1, len(outcomes)):.1%} "
        f"| {len(ok) / seconds:.2f} | {percentile_ms(ok, 50):.0f} | {percentile_ms(ok, 99):.0f} "
        f"| {', '.join(f'{status} {count}' for status, count in sorted(refused.items())) or '-'} |"
    )


def render(result: Fairness) -> str:
    rates, seconds = result.rates, result.seconds
    return "\n".join(
        [
            "## Tenants: fairness at the edge",
            "",
            f"{this_processor().describe()}. One "
            "tritonserver (the shipped models), Envoy (`server/edge/`) in front with a "
            f"tenants file written from the capacity measured first, straight to Triton: "
            f"{rates.capacity:.2f} requests/s of {TEXTS_PER_REQUEST} texts with 4 closed-loop "
            f"clients. Tenant A's quota and B's steady rate: {QUOTA_SHARE:.0%} of it, "
            f"{rates.quota:.2f} requests/s. Open-loop arrivals for {seconds:.0f} s per phase; "
            f"B's client deadline 5 s; A floods at {FLOOD_MULTIPLE:g}x its quota; A's bulk "
            f"tenant may send the rest of the capacity ({rates.bulk:.2f} requests/s) and "
            f"does, with a {BULK_DEADLINE_S:g} s deadline. Latency of the answered requests.",
            "",
            "| phase | tenant | sent/s | sent | answered | answered/s | p50 ms | p99 ms | "
            "refused (status) |",
            "|---|---|---|---|---|---|---|---|---|",
            _row("B alone", "B (interactive)", rates.quota, result.alone, seconds),
            _row("A floods", "B (interactive)", rates.quota, result.flooded, seconds),
            _row("A floods", "A (interactive)", rates.flood, result.flood, seconds),
            _row("A bulk", "B (interactive)", rates.quota, result.beside_bulk, seconds),
            _row("A bulk", "A (bulk)", rates.bulk, result.bulk, seconds),
            "",
            "RESOURCE_EXHAUSTED is the edge's rate limit (the request never reached Triton); "
            "UNAVAILABLE is Triton's door (a full queue); DEADLINE_EXCEEDED the client's "
            "deadline.",
            "",
        ]
    )


def tenants_report(workdir: Path, seconds: float) -> str:
    with running_server(workdir / "tenants_server.log") as server:
        rates = measure_rates(server.grpc_url, seconds / 2)
        tenants = workdir / "tenants.toml"
        tenants.write_text(tenants_file(rates))
        with running_edge(server.endpoints, tenants, workdir / "edge") as edge:
            return render(fairness(edge.grpc_url, rates, seconds))
