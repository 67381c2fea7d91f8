"""A reranker's in-process ceiling: the exported scorer graph (the one the server runs) under ONNX
Runtime in this process, one request's 32 pairs per run, tokenized by the exported pair
tokenizer BEFORE the clock starts. As perf/ceiling.py does for embedders, both ways of using
the cores are measured for the same time and the faster is the ceiling: one session per core
with one intra-op thread each, driven by as many threads (ONNX Runtime releases the GIL while it
runs), or one session with a thread per core."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from embedding_client.batching import pad_rows
from tokenizers import Tokenizer

from perf.ceiling import Layout, available_cores, layouts, session
from perf.rerank_load import Point, RerankRequest

Feeds = dict[str, npt.NDArray[np.int64]]
SCORE_OUTPUT = "score"


@dataclass(frozen=True)
class ScorerExport:
    """The files export/ writes for a reranker (EXPORTS/<name>/reranker/...)."""

    root: Path

    @property
    def graph(self) -> Path:
        return self.root / "reranker" / "scorer" / "1" / "model.onnx"

    @property
    def tokenizer(self) -> Path:
        return self.root / "reranker" / "pair_tokenizer" / "1" / "tokenizer.json"

    @property
    def inputs(self) -> list[str]:
        record = json.loads((self.graph.parent / "export.json").read_text())
        return [str(name) for name in record["inputs"]]


def feeds(export: ScorerExport, requests: Sequence[RerankRequest]) -> list[Feeds]:
    """Each request's pairs as the served pair tokenizer encodes them, right-padded to the
    request's longest pair, with only the inputs the graph takes."""
    tokenizer = Tokenizer.from_file(str(export.tokenizer))
    tokenizer.no_padding()
    wanted = export.inputs
    batches = []
    for request in requests:
        encodings = tokenizer.encode_batch(request.pairs)
        input_ids, attention_mask = pad_rows([encoding.ids for encoding in encodings])
        # Token types padded with 0, as the pair tokenizer stage pads them.
        type_ids, _ = pad_rows([encoding.type_ids for encoding in encodings])
        every = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "token_type_ids": type_ids,
        }
        batches.append({name: every[name] for name in wanted})
    return batches


def scores(export: ScorerExport, request: RerankRequest) -> npt.NDArray[np.float32]:
    """The graph's scores of one request's pairs."""
    (batch,) = feeds(export, [request])
    return session(export.graph, 1).run([SCORE_OUTPUT], batch)[0].reshape(-1)


@dataclass(frozen=True)
class CeilingPoint:
    layout: Layout
    point: Point


def measure(
    export: ScorerExport, batches: Sequence[Feeds], layout: Layout, seconds: float
) -> CeilingPoint:
    """The batches in a loop from `layout.sessions` threads for about `seconds`, each thread
    from its own offset, finishing the request it is on; each session first runs one request
    untimed."""
    sessions: list[ort.InferenceSession] = [
        session(export.graph, layout.threads) for _ in range(layout.sessions)
    ]
    for model in sessions:
        model.run([SCORE_OUTPUT], batches[0])
    latencies: list[list[float]] = [[] for _ in sessions]
    pairs = [0] * len(sessions)
    start = threading.Barrier(len(sessions) + 1)
    deadline = 0.0

    def drive(index: int) -> None:
        position = index * len(batches) // len(sessions)
        start.wait()
        while time.perf_counter() < deadline:
            batch = batches[position % len(batches)]
            began = time.perf_counter()
            sessions[index].run([SCORE_OUTPUT], batch)
            latencies[index].append((time.perf_counter() - began) * 1000)
            pairs[index] += int(batch["input_ids"].shape[0])
            position += 1

    threads = [threading.Thread(target=drive, args=(index,)) for index in range(len(sessions))]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    every = tuple(value for per_thread in latencies for value in per_thread)
    point = Point(layout.sessions, sum(pairs), len(every), elapsed, every)
    return CeilingPoint(layout, point)


def ceiling(
    export: ScorerExport, requests: Sequence[RerankRequest], seconds: float
) -> list[CeilingPoint]:
    """Every layout's run, `seconds` each."""
    batches = feeds(export, requests)
    return [measure(export, batches, layout, seconds) for layout in layouts(available_cores())]
