"""Measure what the padding scheme buys.

In-process first: ONNX Runtime on one thread, the same short English texts
(from Python's pydoc_data) run in groups of N rows, in arrival order or sorted
by length, each group padded to its longest row.

Then served, each variant on a real tritonserver driven by closed-loop gRPC
clients, with the batch sizes the embedder executed read from Triton's
statistics API:
- shipped: each request padded to its own longest text; ragged batching
  merges requests of different lengths; the embedder sorts the merged rows by
  length and runs groups of at most `tokens_per_run` padded tokens;
- without ragged batching: Triton merges only requests of equal shape;
- one run per execute: the merged rows padded to the longest of them all.

    .venv/bin/python -m perf.padding_effect [--clients 16] [--texts-per-request 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer
from tritonclient.grpc import model_config_pb2

from harness.load import closed_loop, percentile_ms, request_texts, short_texts
from harness.priority import BULK
from harness.repository import repository_variant, set_parameter
from harness.server import RunningServer, running_server
from server.paths import ONNX_MODEL_DIR, ONNX_RUNTIME_REPOSITORIES, TOKENIZER_JSON

WARMUP_S = 3.0


@dataclass(frozen=True)
class LoadResult:
    sentences_per_s: float
    p50_ms: float
    p99_ms: float
    embedder_batches: Counter[int]

    @property
    def mean_batch(self) -> float:
        executions = sum(self.embedder_batches.values())
        rows = sum(size * count for size, count in self.embedder_batches.items())
        return rows / executions if executions else 0.0


def embedder_batches(server: RunningServer) -> Counter[int]:
    url = f"http://{server.http_url}/v2/models/embedder/stats"
    with urllib.request.urlopen(url) as reply:
        stats = json.load(reply)["model_stats"][0]["batch_stats"]
    return Counter({entry["batch_size"]: entry["compute_infer"]["count"] for entry in stats})


def drive(
    server: RunningServer, requests: list[list[str]], clients: int, seconds: float
) -> LoadResult:
    """harness.load's closed loop at the bulk level (the one meant for
    throughput), after a warm-up run that is not counted."""
    asyncio.run(closed_loop(server.grpc_url, requests, clients, WARMUP_S, priority=BULK))
    before = embedder_batches(server)
    outcomes = asyncio.run(closed_loop(server.grpc_url, requests, clients, seconds, priority=BULK))
    failed = Counter(outcome.status for outcome in outcomes if not outcome.ok)
    if failed:
        raise RuntimeError(f"requests failed during the measurement: {dict(failed)}")
    return LoadResult(
        sentences_per_s=len(outcomes) * len(requests[0]) / seconds,
        p50_ms=percentile_ms(outcomes, 50),
        p99_ms=percentile_ms(outcomes, 99),
        embedder_batches=embedder_batches(server) - before,
    )


def without_ragged_batching(config: model_config_pb2.ModelConfig) -> None:
    for tensor in config.input:
        tensor.allow_ragged_batch = False


def in_process_table(texts: list[str], group_sizes: list[int]) -> tuple[list[str], float]:
    """Table rows of sentences/s and padded/real tokens of ONNX Runtime on one
    thread, and the texts' mean token count."""
    tokenizer = Tokenizer.from_file(str(TOKENIZER_JSON))
    encodings = tokenizer.encode_batch(texts)
    lengths = np.array([len(encoding.ids) for encoding in encodings])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        str(ONNX_MODEL_DIR / "model.onnx"),
        options,
        providers=["CPUExecutionProvider"],
    )

    def run(order: np.ndarray, group_size: int) -> tuple[float, float]:
        started = time.perf_counter()
        padded = 0
        for start in range(0, len(order), group_size):
            group = order[start : start + group_size]
            width = int(lengths[group].max())
            input_ids = np.zeros((len(group), width), np.int64)
            for row, index in enumerate(group):
                input_ids[row, : lengths[index]] = encodings[index].ids
            session.run(None, {"input_ids": input_ids, "attention_mask": (input_ids != 0) * 1})
            padded += width * len(group)
        return len(order) / (time.perf_counter() - started), padded / lengths.sum()

    rows = []
    for group_size in group_sizes:
        arrival = run(np.arange(len(texts)), group_size)
        by_length = run(np.argsort(lengths, kind="stable"), group_size)
        rows.append(
            f"| {group_size} | {arrival[0]:.1f} | {arrival[1]:.2f} | "
            f"{by_length[0]:.1f} | {by_length[1]:.2f} |"
        )
    return rows, float(lengths.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--texts-per-request", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--output", type=Path, help="also write the markdown table here")
    args = parser.parse_args()

    texts = short_texts(2000)
    in_process, mean_tokens = in_process_table(texts[:512], [1, 4, 8, 16, 32, 64])
    requests = request_texts(2000, args.texts_per_request)
    rows = []
    with tempfile.TemporaryDirectory(prefix="padding_effect_") as workdir:
        schemes = {
            "shipped: ragged batching, length-sorted groups of <= tokens_per_run": ONNX_RUNTIME_REPOSITORIES,
            "without ragged batching (equal shapes merge only)": [
                repository_variant(
                    Path(workdir) / "no_ragged",
                    {"embedder": without_ragged_batching},
                    ONNX_RUNTIME_REPOSITORIES,
                )
            ],
            "ragged batching, one run per execute (pad to longest)": [
                repository_variant(
                    Path(workdir) / "one_run",
                    {"embedder": set_parameter("tokens_per_run", "100000000")},
                    ONNX_RUNTIME_REPOSITORIES,
                )
            ],
        }
        for name, repositories in schemes.items():
            with running_server(Path(workdir) / "server.log", repositories) as server:
                result = drive(server, requests, args.clients, args.seconds)
            common = ", ".join(
                f"{size}x{count}" for size, count in sorted(result.embedder_batches.most_common(6))
            )
            rows.append(
                f"| {name} | {result.sentences_per_s:.1f} | {result.p50_ms:.0f} | "
                f"{result.p99_ms:.0f} | {result.mean_batch:.1f} | {common} |"
            )
    table = "\n".join(
        [
            "In-process ONNX Runtime, 1 thread, 512 short texts (mean "
            f"{mean_tokens:.1f} tokens), groups padded to their longest row:",
            "",
            "| rows per run | arrival order: sentences/s | padded/real tokens "
            "| sorted by length: sentences/s | padded/real tokens |",
            "|---|---|---|---|---|",
            *in_process,
            "",
            f"Served: {args.clients} concurrent gRPC clients x {args.texts_per_request} short texts per "
            f"request, {args.seconds:.0f} s measured after {WARMUP_S:.0f} s warm-up.",
            "",
            "| padding scheme | sentences/s | p50 ms | p99 ms | mean embedder batch "
            "| most frequent embedder batches (size x executions) |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(table + "\n")


if __name__ == "__main__":
    main()
