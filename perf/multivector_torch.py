"""sentence-transformers in-process, for perf/multivector.py: MultiVectorEncoder.encode_document's
vectors of the first request's documents and MultiVectorEncoder.similarity's MaxSim scores of its
query against them (the references the served vectors and scores are checked against), then
texts/s of encode_document over a fixed time, one request's documents per call, in a loop. torch
lives only in the export environment, so perf/multivector.py runs this there
(harness/export_environment.py):

    .venv-export/bin/python -m perf.multivector_torch < job.json

Reads `{"model_dir": str, "requests": [[query, [document, ...]], ...], "seconds": float,
"reference": str}`, writes to the path `reference` names an .npz of `counts` (vectors per
document), `vectors` (theirs, one after another, float32) and `scores` (float32), and to stdout
`{"loop": LOOP, "threads": int}`, LOOP as perf/sparse_torch.py's. Standard library, numpy, torch
and sentence-transformers only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

from perf.sparse_torch import timed_loop


def main() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from sentence_transformers import MultiVectorEncoder

    job: dict[str, Any] = json.load(sys.stdin)
    model = MultiVectorEncoder(job["model_dir"], device="cpu")
    query, documents = job["requests"][0]

    def encode_document(texts: list[str]) -> Any:
        # One call per request, its documents in one batch, as a server would run them; what a
        # caller gets by default (a tensor of vectors per document).
        return model.encode_document(texts, batch_size=len(texts), show_progress_bar=False)

    vectors = encode_document(documents)
    scores = model.similarity(model.encode_query([query], show_progress_bar=False), vectors)[0]
    np.savez(
        job["reference"],
        counts=np.asarray([len(each) for each in vectors], np.int64),
        vectors=torch.cat(vectors).to(torch.float32).numpy(),
        scores=scores.to(torch.float32).numpy(),
    )
    batches = [list(request_documents) for _, request_documents in job["requests"]]
    json.dump(
        {
            "loop": timed_loop(encode_document, batches, float(job["seconds"])),
            "threads": torch.get_num_threads(),
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
