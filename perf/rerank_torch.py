"""sentence-transformers' CrossEncoder.predict in-process, for perf/rerank.py: the scores of the
first request (the reference the served scores are checked against) and pairs/s over a fixed
time, one request's pairs per predict call, in a loop. torch lives only in the export
environment, so perf/rerank.py runs this there (harness/export_environment.py):

    .venv-export/bin/python -m perf.rerank_torch < job.json

Reads `{"model_dir": str, "requests": [[query, [document, ...]], ...], "seconds": float}` and
writes `{"scores": [float, ...], "pairs": int, "seconds": float, "latencies_ms": [float, ...],
"threads": int}`. Standard library, torch and sentence-transformers only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from sentence_transformers import CrossEncoder

    job: dict[str, Any] = json.load(sys.stdin)
    model = CrossEncoder(job["model_dir"], device="cpu")
    requests = [
        [(query, document) for document in documents] for query, documents in job["requests"]
    ]

    def predict(pairs: list[tuple[str, str]]) -> Any:
        # One call per request, its pairs in one batch, as a server would run them.
        return model.predict(
            pairs, batch_size=len(pairs), convert_to_numpy=True, show_progress_bar=False
        )

    # The first call is untimed: it loads kernels and sizes allocations.
    scores = predict(requests[0])
    latencies = []
    pairs = 0
    began = time.perf_counter()
    deadline = began + float(job["seconds"])
    position = 0
    while time.perf_counter() < deadline:
        request = requests[position % len(requests)]
        start = time.perf_counter()
        predict(request)
        latencies.append((time.perf_counter() - start) * 1000)
        pairs += len(request)
        position += 1
    json.dump(
        {
            "scores": scores.astype("float32").tolist(),
            "pairs": pairs,
            "seconds": time.perf_counter() - began,
            "latencies_ms": latencies,
            "threads": torch.get_num_threads(),
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
