"""sentence-transformers in-process, for perf/sparse.py: SparseEncoder.encode's rows of the first
request (the reference the served rows are checked against), then texts/s of SparseEncoder.encode
and of SentenceTransformer.encode on the dense folder of the same encoder, each over a fixed time,
one request's texts per call, in a loop. torch lives only in the export environment, so
perf/sparse.py runs this there (harness/export_environment.py):

    .venv-export/bin/python -m perf.sparse_torch < job.json

Reads `{"sparse_dir": str, "dense_dir": str, "requests": [[text, ...], ...], "seconds": float}`
and writes `{"reference": [{"indices": [int, ...], "values": [float, ...]}, ...], "sparse": LOOP,
"dense": LOOP, "threads": int}`, a LOOP being `{"texts": int, "seconds": float, "latencies_ms":
[float, ...]}`. Standard library, torch and sentence-transformers only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def timed_loop(
    encode: Callable[[list[str]], Any], requests: list[list[str]], seconds: float
) -> dict[str, Any]:
    """`encode` on the requests in turn for `seconds`, after one untimed call (it loads kernels
    and sizes allocations)."""
    encode(requests[0])
    latencies = []
    texts = 0
    began = time.perf_counter()
    deadline = began + seconds
    position = 0
    while time.perf_counter() < deadline:
        request = requests[position % len(requests)]
        start = time.perf_counter()
        encode(request)
        latencies.append((time.perf_counter() - start) * 1000)
        texts += len(request)
        position += 1
    return {"texts": texts, "seconds": time.perf_counter() - began, "latencies_ms": latencies}


def main() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SentenceTransformer, SparseEncoder

    job: dict[str, Any] = json.load(sys.stdin)
    requests: list[list[str]] = job["requests"]
    seconds = float(job["seconds"])
    sparse = SparseEncoder(job["sparse_dir"], device="cpu")
    dense = SentenceTransformer(job["dense_dir"], device="cpu")

    # One call per request, its texts in one batch, as a server would run them. Each answers
    # what a caller gets by default: SparseEncoder a sparse tensor, SentenceTransformer unit-length
    # rows (the served dense rows are normalized too).
    def encode_sparse(texts: list[str]) -> Any:
        return sparse.encode(texts, batch_size=len(texts), show_progress_bar=False)

    def encode_dense(texts: list[str]) -> Any:
        return dense.encode(
            texts, batch_size=len(texts), normalize_embeddings=True, show_progress_bar=False
        )

    reference = []
    for row in encode_sparse(requests[0]).to_dense().to(torch.float32):
        (indices,) = torch.nonzero(row > 0, as_tuple=True)
        reference.append({"indices": indices.tolist(), "values": row[indices].tolist()})
    json.dump(
        {
            "reference": reference,
            "sparse": timed_loop(encode_sparse, requests, seconds),
            "dense": timed_loop(encode_dense, requests, seconds),
            "threads": torch.get_num_threads(),
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
