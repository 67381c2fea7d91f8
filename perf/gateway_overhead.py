"""Measure what the gateway adds to end-to-end latency, what this tree's
gateway costs against another commit's, and what the client library spends
decoding embeddings.

One tritonserver and two gateways in front of it (this tree's, and the one
of the commit --against names, HEAD by default, run from its files), driven
by closed-loop asyncio clients on keep-alive connections, the same requests
(short English texts) on four routes, alternated in rounds so that drift on
this small machine hits all of them:
- direct: the library's asyncio gRPC client, texts to Triton's `embed`;
- direct, pretokenized: the same client tokenizing locally, ids to
  `embed_tokens` (the route the gateway takes to Triton);
- gateway: POST /v1/embeddings with encoding_format=base64, decoded to
  float32 as the openai SDK does, on this tree's gateway and on the other.

Then the decode cost per 1000 embeddings, on real response bytes.

    .venv/bin/python -m perf.gateway_overhead [--clients 16] [--texts-per-request 8] \
        [--against HEAD]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import itertools
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
import timeit
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np
import orjson
import tritonclient.grpc as grpcclient
from embedding_client import AsyncEmbeddingClient
from embedding_client.batching import split_texts
from embedding_client.decode import assemble
from embedding_client.transport import OUTPUT, infer_inputs

from harness.gateway import RunningGateway, running_gateway
from harness.load import short_texts
from harness.server import RunningServer, running_server
from perf.process_cpu import cpu_seconds
from perf.report_command import write_report
from server.paths import REPO_ROOT, TOKENIZER_JSON

TOKENIZER = TOKENIZER_JSON
RESULT = REPO_ROOT / "perf" / "results" / "debian12-2core" / "gateway_overhead.md"
# The gateway serves the Triton model the direct routes call (`embed`, and
# `embed_tokens` for ids), so the three routes reach the same models.
MODEL_NAME = "embed"
GATEWAY_ROUTE = "gateway: POST /v1/embeddings, base64"
# The folders a commit's gateway runs from: the client library, and since the
# gateway is a package of its own, it and the catalog package.
GATEWAY_SOURCES = ("clients", "gateway", "catalog")
WARMUP_S = 3.0
DECODE_ROWS = 1000

Call = Callable[[list[str]], Awaitable[np.ndarray]]


@dataclass(frozen=True)
class Latencies:
    seconds: list[float]
    wall_s: float
    texts_per_request: int

    def ms(self, quantile: float) -> float:
        return float(np.quantile(self.seconds, quantile)) * 1000

    @property
    def mean_ms(self) -> float:
        return float(np.mean(self.seconds)) * 1000

    @property
    def texts_per_s(self) -> float:
        return len(self.seconds) * self.texts_per_request / self.wall_s


async def closed_loop(
    call: Call, batches: list[list[str]], clients: int, seconds: float
) -> Latencies:
    """`clients` workers, each sending its next request when the last returns."""
    deadline = time.perf_counter() + seconds
    order = itertools.count()
    latencies: list[float] = []

    async def worker() -> None:
        while time.perf_counter() < deadline:
            texts = batches[next(order) % len(batches)]
            start = time.perf_counter()
            await call(texts)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return Latencies(latencies, time.perf_counter() - start, len(batches[0]))


def gateway_call(session: aiohttp.ClientSession, url: str, key: str | None = None) -> Call:
    """POST /v1/embeddings of `texts`; `key`: the caller's, as a gateway
    that forwards keys to an edge needs it."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"

    async def call(texts: list[str]) -> np.ndarray:
        body = orjson.dumps({"model": MODEL_NAME, "input": texts, "encoding_format": "base64"})
        async with session.post(url, data=body, headers=headers) as reply:
            reply.raise_for_status()
            payload = orjson.loads(await reply.read())
        rows = [base64.b64decode(item["embedding"]) for item in payload["data"]]
        return np.frombuffer(b"".join(rows), "<f4").reshape(len(rows), -1)

    return call


def merge(parts: list[Latencies]) -> Latencies:
    return Latencies(
        [value for part in parts for value in part.seconds],
        sum(part.wall_s for part in parts),
        parts[0].texts_per_request,
    )


async def alternate(
    routes: dict[str, Call], batches: list[list[str]], args: argparse.Namespace
) -> dict[str, Latencies]:
    runs: dict[str, list[Latencies]] = {name: [] for name in routes}
    names = list(routes)
    for round_index in range(args.rounds):
        # Rotate the order each round so no route always follows another.
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            latencies = await closed_loop(routes[name], batches, args.clients, args.seconds)
            runs[name].append(latencies)
            print(f"round {round_index + 1}: {name}: {latencies.mean_ms:.1f} ms", flush=True)
    return {name: merge(parts) for name, parts in runs.items()}


def baseline_route(ref: str) -> str:
    return f"gateway at {ref}: POST /v1/embeddings, base64"


async def measure_routes(
    server: RunningServer,
    gateways: dict[str, RunningGateway],
    args: argparse.Namespace,
) -> tuple[dict[str, Latencies], dict[str, float]]:
    """Latencies per route, and each gateway process's CPU ms per request
    (gateways: by route)."""
    size = args.texts_per_request
    texts = short_texts(size * 256)
    batches = [texts[i : i + size] for i in range(0, len(texts) - size + 1, size)]
    connector = aiohttp.TCPConnector(limit=args.clients * len(gateways))
    async with (
        AsyncEmbeddingClient(
            server.grpc_url, max_in_flight=args.clients, priority=args.priority
        ) as direct,
        AsyncEmbeddingClient(
            server.grpc_url, tokenizer=TOKENIZER, max_in_flight=args.clients, priority=args.priority
        ) as pretokenized,
        aiohttp.ClientSession(connector=connector) as session,
    ):
        routes: dict[str, Call] = {
            "direct: Triton gRPC `embed`": direct.embed,
            "direct, pretokenized: Triton gRPC `embed_tokens`": pretokenized.embed,
        }
        for route, gateway in gateways.items():
            routes[route] = gateway_call(session, f"{gateway.base_url}/embeddings")
        for call in routes.values():
            await closed_loop(call, batches, args.clients, WARMUP_S)
        # Each gateway idles while the other routes run: its CPU time from
        # here on goes to its own measured requests.
        cpu_start = {route: cpu_seconds(gateway.pid) for route, gateway in gateways.items()}
        results = await alternate(routes, batches, args)
        cpu_ms = {
            route: (cpu_seconds(gateway.pid) - cpu_start[route])
            * 1000
            / len(results[route].seconds)
            for route, gateway in gateways.items()
        }
    return results, cpu_ms


@contextmanager
def gateway_program(ref: str) -> Iterator[tuple[str, ...]]:
    """The command that runs the gateway of commit `ref`, from its files
    extracted to a scratch folder, on this environment's packages."""
    present = [
        folder
        for folder in GATEWAY_SOURCES
        if subprocess.run(
            ["git", "cat-file", "-e", f"{ref}:{folder}"], cwd=REPO_ROOT, stderr=subprocess.DEVNULL
        ).returncode
        == 0
    ]
    archive = subprocess.run(
        ["git", "archive", ref, *present], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryDirectory() as scratch:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(scratch, filter="data")
        path = os.pathsep.join(str(Path(scratch, folder)) for folder in present)
        module = (
            "embedding_gateway.server"
            if "gateway" in present
            else "embedding_client.gateway.server"
        )
        yield ("env", f"PYTHONPATH={path}", sys.executable, "-m", module)


def real_responses(server: RunningServer) -> list[grpcclient.InferResult]:
    texts = list(itertools.islice(itertools.cycle(short_texts(DECODE_ROWS)), DECODE_ROWS))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    return [
        client.infer("embed", infer_inputs(grpcclient, request))
        for request in split_texts(texts, 64)
    ]


def best_us(statement: Callable[[], object]) -> float:
    timer = timeit.Timer(statement)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=5, number=number)) / number * 1e6


def measure_decoding(server: RunningServer) -> dict[str, float]:
    """Microseconds per 1000 float32 embeddings, from received bytes to a
    [1000, 384] array."""
    results = real_responses(server)
    vectors = assemble([result.as_numpy(OUTPUT) for result in results], "float32")
    base64_rows = [base64.b64encode(row).decode() for row in vectors]
    json_lists = json.dumps(vectors.tolist())
    return {
        "library: as_numpy + view + concatenate, 16 responses": best_us(
            lambda: assemble([result.as_numpy(OUTPUT) for result in results], "float32")
        ),
        "openai SDK style: base64 per row + np.frombuffer": best_us(
            lambda: [np.frombuffer(base64.b64decode(row), "<f4") for row in base64_rows]
        ),
        "float lists: json.loads + np.array": best_us(
            lambda: np.array(json.loads(json_lists), dtype=np.float32)
        ),
    }


def overhead(gateway: float, direct: float) -> str:
    return f"{(gateway / direct - 1) * 100:+.1f}%"


def report(
    routes: dict[str, Latencies],
    gateway_cpu_ms: dict[str, float],
    decoding: dict[str, float],
    args: argparse.Namespace,
) -> str:
    direct, pretokenized, gateway, baseline = routes.values()
    lines = [
        f"{args.clients} concurrent closed-loop clients x {args.texts_per_request} short texts "
        f"per request on keep-alive connections, {args.rounds} rounds of {args.seconds:.0f} s "
        f"per route (order rotated each round) after {WARMUP_S:.0f} s warm-up each, Triton "
        f"priority level {args.priority} on every route; this tree's gateway beside the one "
        f"of {args.against}; {platform.machine()}, {len(os.sched_getaffinity(0))} cores "
        "shared by tritonserver, both gateways and the load generator.",
        "",
        "| route | requests | texts/s | mean ms | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for name, latencies in routes.items():
        lines.append(
            f"| {name} | {len(latencies.seconds)} | {latencies.texts_per_s:.1f} | "
            f"{latencies.mean_ms:.1f} | {latencies.ms(0.5):.1f} | {latencies.ms(0.99):.1f} |"
        )
    lines += [
        "",
        "This tree's gateway latency compared with calling Triton directly, and its",
        f"throughput and latency compared with the gateway of {args.against}:",
        "",
        "| baseline | texts/s | mean | p50 | p99 |",
        "|---|---|---|---|---|",
    ]
    baselines = (
        ("direct `embed`", direct),
        ("direct `embed_tokens`", pretokenized),
        (f"the gateway at {args.against}", baseline),
    )
    for name, other in baselines:
        lines.append(
            f"| {name} | {overhead(gateway.texts_per_s, other.texts_per_s)} | "
            f"{overhead(gateway.mean_ms, other.mean_ms)} | "
            f"{overhead(gateway.ms(0.5), other.ms(0.5))} | "
            f"{overhead(gateway.ms(0.99), other.ms(0.99))} |"
        )
    lines += ["", "Gateway process CPU time per request:", ""]
    lines += [
        f"- {name}: {cpu_ms:.2f} ms ({cpu_ms / routes[name].mean_ms * 100:.2f}% of its mean "
        "latency)"
        for name, cpu_ms in gateway_cpu_ms.items()
    ]
    lines += [
        "",
        f"Decoding {DECODE_ROWS} float32 embeddings (384 dimensions) from real response bytes "
        "(best of 5 timeit repeats):",
        "",
        "| decode | µs per 1000 embeddings |",
        "|---|---|",
    ]
    lines += [f"| {name} | {us:.0f} |" for name, us in decoding.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--texts-per-request", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument(
        "--priority",
        type=int,
        default=2,
        help="Triton priority level on every route; the bulk level (2) queues instead of "
        "rejecting at this concurrency",
    )
    parser.add_argument(
        "--against",
        default="HEAD",
        metavar="REF",
        help="the commit whose gateway this tree's is measured beside (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    extra_args = (f"--priority={args.priority}",)
    with tempfile.TemporaryDirectory() as scratch, gateway_program(args.against) as program:
        logs = Path(scratch)
        with (
            running_server(logs / "tritonserver.log") as server,
            running_gateway(
                server.grpc_url,
                [(MODEL_NAME, TOKENIZER)],
                logs / "gateway.log",
                extra_args=extra_args,
            ) as gateway,
            running_gateway(
                server.grpc_url,
                [(MODEL_NAME, TOKENIZER)],
                logs / "baseline.log",
                extra_args=extra_args,
                program=program,
                cwd=logs,
            ) as baseline,
        ):
            gateways = {GATEWAY_ROUTE: gateway, baseline_route(args.against): baseline}
            routes, gateway_cpu_ms = asyncio.run(measure_routes(server, gateways, args))
            decoding = measure_decoding(server)
    write_report(RESULT, report(routes, gateway_cpu_ms, decoding, args))


if __name__ == "__main__":
    main()
