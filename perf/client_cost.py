"""What an embedding costs the client: bytes on the wire and the time from
received bytes to a numpy array, per output format, on real responses of the
served `embed` ensemble (1000 short texts, sent as requests of 64 over gRPC).

JSON float lists are what an HTTP/JSON embedding API sends: the same float32
values written with Python's `json` (shortest round-trip decimal per float),
decoded with `json.loads` + `np.array`, and with orjson for comparison.
"""

from __future__ import annotations

import json
import timeit
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import orjson
import tritonclient.grpc as grpcclient
from embedding_client.decode import assemble

from harness.requests import text_inputs
from perf.workloads import texts

EMBEDDINGS = 1000
REQUEST_ROWS = 64
BYTE_FORMATS = ("float32", "float16", "int8", "ubinary")


@dataclass(frozen=True)
class ClientCost:
    output: str
    wire_bytes_per_embedding: float
    decode_us_per_1000: float


def _best_us(statement: Callable[[], object]) -> float:
    timer = timeit.Timer(statement)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=5, number=number)) / number * 1e6


def _responses(grpc_url: str, dtype: str) -> list[grpcclient.InferResult]:
    client = grpcclient.InferenceServerClient(grpc_url)
    sample = texts("short", EMBEDDINGS)
    results = []
    for start in range(0, EMBEDDINGS, REQUEST_ROWS):
        inputs = text_inputs(grpcclient, sample[start : start + REQUEST_ROWS])
        results.append(client.infer("embed", inputs, parameters={"dtype": dtype}))
    return results


def _bytes_cost(grpc_url: str, dtype: str) -> tuple[ClientCost, np.ndarray]:
    results = _responses(grpc_url, dtype)
    # The whole gRPC response message: tensor bytes plus protobuf framing.
    wire = sum(result.get_response().ByteSize() for result in results)
    vectors = assemble([result.as_numpy("EMBEDDING") for result in results], dtype)
    decode_us = _best_us(
        lambda: assemble([result.as_numpy("EMBEDDING") for result in results], dtype)
    )
    return ClientCost(dtype, wire / EMBEDDINGS, decode_us * 1000 / EMBEDDINGS), vectors


def measure_client_cost(grpc_url: str) -> list[ClientCost]:
    costs = {}
    float32 = np.empty(0)
    for dtype in BYTE_FORMATS:
        costs[dtype], vectors = _bytes_cost(grpc_url, dtype)
        if dtype == "float32":
            float32 = vectors
    rows = [{"embedding": row} for row in float32.tolist()]
    body = json.dumps({"data": rows})
    json_cost = ClientCost(
        "JSON float lists (json.loads + np.array)",
        len(body.encode()) / EMBEDDINGS,
        _best_us(
            lambda: np.array([row["embedding"] for row in json.loads(body)["data"]], np.float32)
        )
        * 1000
        / EMBEDDINGS,
    )
    orjson_cost = ClientCost(
        "JSON float lists (orjson.loads + np.array)",
        json_cost.wire_bytes_per_embedding,
        _best_us(
            lambda: np.array([row["embedding"] for row in orjson.loads(body)["data"]], np.float32)
        )
        * 1000
        / EMBEDDINGS,
    )
    return [json_cost, orjson_cost, *(costs[dtype] for dtype in BYTE_FORMATS)]


def client_cost_table(costs: list[ClientCost]) -> str:
    json_us = costs[0].decode_us_per_1000
    lines = [
        "| output | bytes on the wire per embedding | decode µs per 1000 embeddings "
        "| decode speed-up vs JSON |",
        "|---|---|---|---|",
    ]
    for cost in costs:
        lines.append(
            f"| {cost.output} | {cost.wire_bytes_per_embedding:.0f} | "
            f"{cost.decode_us_per_1000:.0f} | {json_us / cost.decode_us_per_1000:.0f}x |"
        )
    return "\n".join(lines) + "\n"
