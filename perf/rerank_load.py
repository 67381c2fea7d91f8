"""What perf/rerank.py sends and how it drives a server: fixed, seeded rerank requests (one query
of about 12 tokens against 32 distinct documents of about 96, all cut from the workloads' real
prose, perf/workloads.py), and closed-loop clients that each send the next request as soon as
their last one is answered, for a fixed time, timing every request."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from perf.workloads import texts

DOCUMENTS_PER_REQUEST = 32
SEED = 20240611
# Two consecutive short texts (48 tokens each without [CLS] and [SEP]) make one document.
SHORTS_PER_DOCUMENT = 2


@dataclass(frozen=True)
class RerankRequest:
    query: str
    documents: tuple[str, ...]

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(self.query, document) for document in self.documents]


def rerank_requests(
    count: int, documents: int = DOCUMENTS_PER_REQUEST, seed: int = SEED
) -> list[RerankRequest]:
    """`count` requests, no document or query repeated within or across them, picked at random
    (seeded) from the prose."""
    wanted = count * documents
    # Twice what is needed: the prose repeats a few passages, and texts() repeats past its end.
    shorts = texts("short", 2 * wanted * SHORTS_PER_DOCUMENT)
    pieces = list(
        dict.fromkeys(
            " ".join(shorts[start : start + SHORTS_PER_DOCUMENT])
            for start in range(0, len(shorts), SHORTS_PER_DOCUMENT)
        )
    )
    queries = list(dict.fromkeys(texts("query", 2 * count)))
    if len(pieces) < wanted or len(queries) < count:
        raise ValueError(f"the prose holds fewer than {count} requests of {documents} documents")
    chooser = random.Random(seed)
    picked = chooser.sample(pieces, wanted)
    return [
        RerankRequest(query, tuple(picked[index * documents : (index + 1) * documents]))
        for index, query in enumerate(chooser.sample(queries, count))
    ]


@dataclass(frozen=True)
class Point:
    """One closed-loop run: `concurrency` clients (1 for an in-process loop) for `seconds`."""

    concurrency: int
    pairs: int
    requests: int
    seconds: float
    latencies_ms: tuple[float, ...]

    @property
    def pairs_per_s(self) -> float:
        return self.pairs / self.seconds

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q))


# A client's call: sends one request, returns its scores in document order once answered.
Call = Callable[[RerankRequest], list[float]]


def closed_loop(
    make_call: Callable[[], Call],
    requests: Sequence[RerankRequest],
    concurrency: int,
    seconds: float,
) -> Point:
    """`concurrency` threads, each with its own client (`make_call()`), sending requests in turn
    from their own offset until `seconds` have passed; each finishes the request it is on. The
    rate counts every pair answered between the common start and the last answer, so requests
    longer than the run still count whole. The clients first send one request each, all at once
    and untimed: their connections, and the server's first requests at this load."""
    calls = [make_call() for _ in range(concurrency)]
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda call: call(requests[0]), calls))
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    pairs = [0] * concurrency
    start = threading.Barrier(concurrency + 1)
    deadline = 0.0
    failures: list[BaseException] = []

    def drive(index: int) -> None:
        position = index * len(requests) // concurrency
        start.wait()
        try:
            while time.perf_counter() < deadline:
                request = requests[position % len(requests)]
                began = time.perf_counter()
                calls[index](request)
                latencies[index].append((time.perf_counter() - began) * 1000)
                pairs[index] += len(request.documents)
                position += 1
        except BaseException as error:  # re-raised below, in the caller's thread
            failures.append(error)

    threads = [threading.Thread(target=drive, args=(index,)) for index in range(concurrency)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise failures[0]
    every = tuple(value for per_thread in latencies for value in per_thread)
    return Point(concurrency, sum(pairs), len(every), elapsed, every)
