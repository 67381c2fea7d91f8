"""PyLate in-process, for perf/multivector.py: its ColBERT model loaded from the benchmark's
MultiVectorEncoder folder, the first request's document vectors, then texts/s of
`encode(is_query=False)` over a fixed time, one request's documents per call, in a loop. PyLate
pins its own sentence-transformers and torch, so it has a virtual environment of its own, outside
the project's requirements:

    python -m venv build/pylate-venv && build/pylate-venv/bin/pip install pylate==1.6.0
    build/pylate-venv/bin/python -m perf.multivector_pylate < job.json

Reads `{"model_dir": str, "requests": [[query, [document, ...]], ...], "seconds": float,
"vectors": str}` and writes `{"versions": {package: version}}` with either `"error": str` (the
folder did not load: the exception's type and message) or `"loop": LOOP` (as
perf/sparse_torch.py's), the first request's vectors saved as perf/multivector_torch.py saves
them, without scores, to the path `vectors` names. Standard library, numpy and PyLate only.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version
from typing import Any

import numpy as np

from perf.sparse_torch import timed_loop

PACKAGES = ("pylate", "sentence-transformers", "torch")


def main() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    job: dict[str, Any] = json.load(sys.stdin)
    answer: dict[str, Any] = {"versions": {package: version(package) for package in PACKAGES}}
    try:
        from pylate import models

        model = models.ColBERT(model_name_or_path=job["model_dir"], device="cpu")
    except Exception as error:  # what stopped it is the answer
        answer["error"] = f"{type(error).__name__}: {error}"
        json.dump(answer, sys.stdout)
        return

    def encode(texts: list[str]) -> Any:
        # One call per request, its documents in one batch, as the other runs.
        return model.encode(texts, batch_size=len(texts), is_query=False, show_progress_bar=False)

    batches = [list(documents) for _, documents in job["requests"]]
    vectors = [np.asarray(each, np.float32) for each in encode(batches[0])]
    np.savez(
        job["vectors"],
        counts=np.asarray([len(each) for each in vectors], np.int64),
        vectors=np.concatenate(vectors),
    )
    answer["loop"] = timed_loop(encode, batches, float(job["seconds"]))
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
