"""Print BGEM3FlagModel.encode's outputs for the test suite: FlagEmbedding (and torch) live only in
the export environment, so the tests run this script with the export venv's python.

Reads `{"model_dir": str, "texts": [str, ...], "max_length": int}` from stdin (or a JSON list of
such requests, answered from one process) and writes, per text, `{"dense": [float, ...],
"sparse": {"indices": [int, ...], "values": [float, ...]}, "colbert": [[float, ...], ...]}`: its
dense vector, its lexical weights (token ids ascending) and its ColBERT vectors, float32 values,
as BGEM3FlagModel(model_dir, use_fp16=False, devices="cpu").encode gives them truncating at
max_length.
"""

import os
from typing import Any

from reference_jobs import answer_requests


def encode(request: dict[str, Any], models: dict[str, Any]) -> list[dict[str, Any]]:
    """Encodes the request's texts with BGEM3FlagModel on CPU, all three outputs."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from FlagEmbedding import BGEM3FlagModel

    model_dir = str(request["model_dir"])
    if model_dir not in models:
        models[model_dir] = BGEM3FlagModel(model_dir, use_fp16=False, devices="cpu")
    encoded = models[model_dir].encode(
        [str(text) for text in request["texts"]],
        max_length=int(request["max_length"]),
        return_dense=True,
        return_sparse=True,
        return_colbert_vecs=True,
    )
    answers = []
    for dense, weights, colbert in zip(
        encoded["dense_vecs"], encoded["lexical_weights"], encoded["colbert_vecs"], strict=True
    ):
        indices = sorted(int(token_id) for token_id in weights)
        answers.append(
            {
                "dense": dense.tolist(),
                "sparse": {
                    "indices": indices,
                    "values": [float(weights[str(index)]) for index in indices],
                },
                "colbert": colbert.tolist(),
            }
        )
    return answers


def main() -> None:
    """Reads the request or requests, writes the answers."""
    answer_requests(encode)


if __name__ == "__main__":
    main()
