"""What tracing costs the served paths, on this machine: each path with
traces off and at the default sampling ratio, side by side in one run.

The paths:
- Triton: perf_analyzer to the launcher without tenants, which samples
  by counting (server/tracing.py);
- edge: perf_analyzer through the edge with a tenant's key, set up as the
  launcher with tenants sets it up (the catalog's stages readable, so
  perf_analyzer can read the ensemble): the edge draws the requests to
  trace and sends its own spans, Triton traces only those
  (server/edge/tracing.py);
- gateway: closed-loop clients POSTing /v1/embeddings (base64) to the
  OpenAI gateway in front of that edge, the gateway sending its spans
  too; its traced requests carry a context to the edge, which the edge
  follows, and the edge draws its share of the others.

Every request traced is not measured: at 16 clients, about 190 traced
requests/s, tritonserver 2.51 died of a segmentation fault within seconds
(upstream issue triton-inference-server/server#7795, fixed by its pull
request #8144 in a later release than the wheel's).

Every setup runs at once (idle while another is measured), the traced ones
sending their spans to one real Jaeger, and they are measured in turns,
round after round, so a drift of the machine touches them all alike.
perf_analyzer sends query-8 over gRPC at the bulk priority level (the
tenant's, through the edge); the gateway's clients send 8 short texts per
request. No client sends a trace context, so the sampling alone picks
which requests are traced.

    .venv/bin/python -m perf.tracing_overhead [--results perf/results/debian12-2core]

Writes tracing_overhead.md into the results folder and perf_analyzer's CSVs
into its tracing_overhead/ subfolder. Takes about 8 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from embedding_gateway.tracing import SERVICE_NAME as GATEWAY_SERVICE
from model_common.processor import this_processor

from harness.edge import running_edge, tenant_toml
from harness.gateway import running_gateway
from harness.jaeger import RunningJaeger, running_jaeger
from harness.load import short_texts
from harness.priority import BULK
from harness.server import running_server
from perf.gateway_overhead import closed_loop, gateway_call
from perf.report_command import write_report
from perf.sweep import Target, Windows, concurrency_sweep
from perf.workloads import workload
from server.catalog import DEFAULT_CATALOG, read_catalog
from server.edge.tracing import SERVICE_NAME as EDGE_SERVICE
from server.edge.tracing import EdgeTracing
from server.paths import REPO_ROOT, TOKENIZER_JSON
from server.tracing import DEFAULT_SAMPLING, DEFAULT_SERVICE_NAME

LEVELS = (1, 16)
ROUNDS = 3
WINDOWS = Windows(measurement_ms=3000, stability_percentage=50.0, max_trials=6)
PATHS = ("Triton", "edge", "gateway")
# None: traces off.
SAMPLINGS: tuple[float | None, ...] = (None, DEFAULT_SAMPLING)
KEY = "tracing-overhead-key"
TEXTS_PER_REQUEST = 8
GATEWAY_RUN_S = 8.0
GATEWAY_WARMUP_S = 2.0


def _name(sampling: float | None) -> str:
    if sampling is None:
        return "off"
    default = " (default)" if sampling == DEFAULT_SAMPLING else ""
    return f"sampling {sampling:g}{default}"


@dataclass(frozen=True)
class Run:
    texts_per_s: float
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class Row:
    path: str
    sampling: float | None
    level: int
    runs: list[Run]

    def median(self, field: str) -> float:
        return statistics.median(getattr(run, field) for run in self.runs)


# One measurement of a setup at a number of clients (and a label for its CSV).
Measure = Callable[[int, str], Run]


def perf_analyzer_measure(target: Target, results: Path) -> Measure:
    def measure(level: int, label: str) -> Run:
        best = concurrency_sweep(
            target,
            workload("query", TEXTS_PER_REQUEST),
            results,
            label=label,
            concurrency=(level, level, 1),
            windows=WINDOWS,
        ).best
        return Run(best.infer_per_sec, best.p50_ms, best.p99_ms)

    return measure


def gateway_measure(url: str) -> Measure:
    texts = short_texts(TEXTS_PER_REQUEST * 256)
    batches = [texts[i : i + TEXTS_PER_REQUEST] for i in range(0, len(texts), TEXTS_PER_REQUEST)]

    def measure(level: int, label: str) -> Run:
        async def run() -> Run:
            connector = aiohttp.TCPConnector(limit=level)
            async with aiohttp.ClientSession(connector=connector) as session:
                call = gateway_call(session, url, KEY)
                await closed_loop(call, batches, level, GATEWAY_WARMUP_S)
                latencies = await closed_loop(call, batches, level, GATEWAY_RUN_S)
            return Run(latencies.texts_per_s, latencies.ms(0.5), latencies.ms(0.99))

        return asyncio.run(run())

    return measure


def measure(
    setups: dict[tuple[str, float | None], Measure],
) -> dict[tuple[str, float | None, int], Row]:
    rows = {
        (path, sampling, level): Row(path, sampling, level, [])
        for (path, sampling) in setups
        for level in LEVELS
    }
    for turn in range(ROUNDS):
        for level in LEVELS:
            for (path, sampling), run in setups.items():
                label = f"{path}_{'off' if sampling is None else sampling}_r{turn}_c{level}"
                rows[(path, sampling, level)].runs.append(run(level, label))
                print(f"round {turn + 1}: {path} {_name(sampling)} c={level}", flush=True)
    return rows


def render(rows: dict[tuple[str, float | None, int], Row], traces: dict[str, int]) -> str:
    lines = [
        "# What tracing costs",
        "",
        f"Processor: {this_processor().describe()}.",
        "",
        "Generated by `.venv/bin/python -m perf.tracing_overhead` in one run: each path "
        "twice at once, traces off and OpenTelemetry traces to a real Jaeger at the default "
        f"sampling ratio {DEFAULT_SAMPLING:g}, measured in turns over {ROUNDS} rounds. "
        "Triton and edge: perf_analyzer, query-8 over gRPC (the edge with a tenant's key); "
        f"gateway: closed-loop clients, {TEXTS_PER_REQUEST} short texts per POST "
        "/v1/embeddings, the gateway in front of the edge. No client sends a trace context. "
        "Medians of the rounds.",
        "",
        "| path | setup | clients | texts/s | / off | p50 ms | p99 ms | p99 / off |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in PATHS:
        for level in LEVELS:
            off = rows[(path, None, level)]
            for sampling in SAMPLINGS:
                row = rows[(path, sampling, level)]
                rate, p99 = row.median("texts_per_s"), row.median("p99_ms")
                lines.append(
                    f"| {path} | {_name(sampling)} | {level} | {rate:.0f} | "
                    f"{rate / off.median('texts_per_s'):.3f} | {row.median('p50_ms'):.2f} | "
                    f"{p99:.2f} | {p99 / off.median('p99_ms'):.3f} |"
                )
    lines += [
        "",
        "Traces Jaeger held after the run, per service (its query API lists 1000 at most): "
        + ", ".join(f"{service} {count}" for service, count in traces.items())
        + ": the traced setups' spans arrived.",
        "",
        "Rounds (texts/s): "
        + "; ".join(
            f"{row.path} {_name(row.sampling)} c={row.level}: "
            + ", ".join(f"{run.texts_per_s:.0f}" for run in row.runs)
            for row in rows.values()
        )
        + ".",
    ]
    return "\n".join(lines) + "\n"


def _tracing(jaeger: RunningJaeger, sampling: float | None) -> list[str]:
    if sampling is None:
        return []
    return [f"--otlp-endpoint={jaeger.otlp_endpoint}", f"--trace-sampling={sampling}"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=REPO_ROOT / "perf" / "results" / "local")
    args = parser.parse_args(argv)
    results = args.results / "tracing_overhead"
    results.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tracing_overhead_") as work, ExitStack() as stack:
        workdir = Path(work)
        jaeger = stack.enter_context(running_jaeger(workdir / "jaeger"))
        tenants = workdir / "tenants.toml"
        tenants.write_text(
            tenant_toml("perf", [KEY], ["embed"], rate=100_000, priority="bulk", in_flight=64)
        )
        key_header = ("-H", f"authorization: Bearer {KEY}")
        catalog = read_catalog(DEFAULT_CATALOG)
        assert not isinstance(catalog, str), catalog
        setups: dict[tuple[str, float | None], Measure] = {}
        for sampling in SAMPLINGS:
            name = "off" if sampling is None else "traced"
            triton = stack.enter_context(
                running_server(
                    workdir / f"triton-{name}.log", extra_args=_tracing(jaeger, sampling)
                )
            )
            setups[("Triton", sampling)] = perf_analyzer_measure(
                Target(triton.grpc_url, priority=BULK), results
            )
            # Behind the edge, Triton traces only what the edge sends a context with.
            behind = stack.enter_context(
                running_server(
                    workdir / f"behind-edge-{name}.log",
                    extra_args=_tracing(jaeger, None if sampling is None else 0.0),
                )
            )
            edge = stack.enter_context(
                running_edge(
                    behind.endpoints,
                    tenants,
                    workdir / f"edge-{name}",
                    catalog.stages(),
                    None if sampling is None else EdgeTracing(jaeger.otlp_endpoint, sampling),
                )
            )
            setups[("edge", sampling)] = perf_analyzer_measure(
                Target(edge.grpc_url, extra=key_header), results
            )
            gateway = stack.enter_context(
                running_gateway(
                    edge.grpc_url,
                    [("embed", TOKENIZER_JSON)],
                    workdir / f"gateway-{name}.log",
                    extra_args=("--forward-api-key", *_tracing(jaeger, sampling)),
                )
            )
            setups[("gateway", sampling)] = gateway_measure(f"{gateway.base_url}/embeddings")
        rows = measure(dict(sorted(setups.items(), key=lambda item: PATHS.index(item[0][0]))))
        traces = {
            service: len(jaeger.find_traces(service, {}, limit=1000))
            for service in (GATEWAY_SERVICE, EDGE_SERVICE, DEFAULT_SERVICE_NAME)
        }
    write_report(args.results / "tracing_overhead.md", render(rows, traces))


if __name__ == "__main__":
    main()
