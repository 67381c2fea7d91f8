"""The model's in-process ceiling: an exported ONNX graph run under ONNX
Runtime in this process, on the same requests as a served workload.

Each request is tokenized as the server's tokenizer stage does it (the
serving tokenizer.json, truncating at the model's max length, each request
padded to its own longest text) BEFORE the clock starts: the ceiling is the
model's, not the tokenizer's. Both ways of using the machine's cores are
measured, for the same time each, and the faster one is the ceiling:
one session per core with one intra-op thread each, driven by as many
Python threads (ONNX Runtime releases the GIL while it runs), or one session
with one intra-op thread per core.
"""

from __future__ import annotations

import os
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

from perf.workloads import Workload
from server.paths import TOKENIZER_JSON

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Batch:
    """One request as the embedder receives it."""

    input_ids: IntArray
    attention_mask: IntArray

    @property
    def sentences(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def tokens(self) -> int:
        """Real (unpadded) tokens."""
        return int(np.count_nonzero(self.attention_mask))


@dataclass(frozen=True)
class Layout:
    """How the cores are used: `sessions` sessions of `threads` intra-op threads each."""

    sessions: int
    threads: int

    def __str__(self) -> str:
        return f"{self.sessions} session(s) x {self.threads} thread(s)"


@dataclass(frozen=True)
class Rate:
    """Throughput of one layout over one timed run.

    `cpu_seconds` is this process's CPU time over the run: below `seconds` x cores, other
    processes took part of the cores, and the per-CPU-second rate is the steadier figure.
    """

    layout: Layout
    sentences_per_s: float
    tokens_per_s: float
    requests: int
    seconds: float
    cpu_seconds: float

    @property
    def sentences_per_cpu_s(self) -> float:
        return self.sentences_per_s * self.seconds / self.cpu_seconds

    @property
    def cpu_share(self) -> float:
        """The part of the machine's cores this run got (1.0: all of them)."""
        return self.cpu_seconds / (self.seconds * available_cores())


@dataclass(frozen=True)
class Ceiling:
    """The best layout's throughput, with every layout's measurement beside it."""

    model_path: Path
    texts_per_request: int
    best: Rate
    rates: tuple[Rate, ...]

    @property
    def sentences_per_s(self) -> float:
        return self.best.sentences_per_s

    @property
    def tokens_per_s(self) -> float:
        return self.best.tokens_per_s

    @property
    def configuration(self) -> str:
        return str(self.best.layout)


def serving_tokenizer(path: Path = TOKENIZER_JSON) -> Tokenizer:
    """The tokenizer.json the server's tokenizer stage loads; it must truncate."""
    tokenizer = Tokenizer.from_file(str(path))
    if tokenizer.truncation is None:
        raise ValueError(f"{path} does not truncate; the server's tokenizer.json always does")
    tokenizer.no_padding()
    return tokenizer


def tokenize(tokenizer: Tokenizer, requests: Sequence[Sequence[str]]) -> list[Batch]:
    """Each request encoded and right-padded to its own longest text."""
    batches = []
    for texts in requests:
        encodings = tokenizer.encode_batch(list(texts))
        batches.append(Batch(*pad_rows([encoding.ids for encoding in encodings])))
    if not batches:
        raise ValueError("the workload has no requests")
    return batches


def session(model_path: Path, threads: int) -> ort.InferenceSession:
    """A CPU session set up as the served embedder sets up its own."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def _run(model: ort.InferenceSession, batch: Batch) -> None:
    model.run(["embedding"], {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask})


def measure(model_path: Path, batches: Sequence[Batch], layout: Layout, seconds: float) -> Rate:
    """Runs the batches in a loop from `layout.sessions` threads for about `seconds`.

    Each thread starts at its own offset in the batches and finishes the request it is on
    when time is up; the rate counts everything done between the common start and the last
    thread's end. Every session first runs the largest batch once, untimed, which grows its
    memory arena to what the others need.
    """
    sessions = [session(model_path, layout.threads) for _ in range(layout.sessions)]
    largest = max(batches, key=lambda batch: batch.input_ids.size)
    for model in sessions:
        _run(model, largest)
    counts = [(0, 0, 0)] * layout.sessions
    start = threading.Barrier(layout.sessions + 1)
    deadline = 0.0

    def drive(index: int) -> None:
        model = sessions[index]
        start.wait()
        requests = sentences = tokens = 0
        position = index * len(batches) // layout.sessions
        while time.perf_counter() < deadline:
            batch = batches[position % len(batches)]
            _run(model, batch)
            position += 1
            requests += 1
            sentences += batch.sentences
            tokens += batch.tokens
        counts[index] = (requests, sentences, tokens)

    threads = [threading.Thread(target=drive, args=(index,)) for index in range(layout.sessions)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    cpu_began = time.process_time()
    deadline = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    cpu_seconds = time.process_time() - cpu_began
    requests, sentences, tokens = (sum(column) for column in zip(*counts, strict=True))
    if requests == 0:
        raise RuntimeError(f"{model_path}: no request finished in {seconds} s")
    return Rate(layout, sentences / elapsed, tokens / elapsed, requests, elapsed, cpu_seconds)


def layouts(cores: int) -> tuple[Layout, ...]:
    """One session per core with one thread each, and one session with a thread per core."""
    if cores == 1:
        return (Layout(1, 1),)
    return (Layout(cores, 1), Layout(1, cores))


def available_cores() -> int:
    return len(os.sched_getaffinity(0))


def ceiling(
    model_path: Path,
    workload: Workload,
    seconds: float,
    tokenizer_path: Path = TOKENIZER_JSON,
) -> Ceiling:
    """The graph's in-process throughput on the workload's requests, the best of the layouts.

    `seconds` is the timed budget of the whole call, shared by the layouts (tokenizing, loading
    sessions and the untimed warm-up come on top).
    """
    batches = tokenize(serving_tokenizer(tokenizer_path), workload.requests)
    candidates = layouts(available_cores())
    rates = tuple(
        measure(model_path, batches, layout, seconds / len(candidates)) for layout in candidates
    )
    return Ceiling(
        model_path=model_path,
        texts_per_request=max(batch.sentences for batch in batches),
        best=max(rates, key=lambda rate: rate.sentences_per_s),
        rates=rates,
    )
