"""Print sentence-transformers reference embeddings for the test suite.

This exists because sentence-transformers (and torch) live only in the export environment,
not in the serving/test environment: the tests run this script with the export venv's python.

Reads `{"model_dir": str, "texts": [str, ...]}` from stdin and writes a JSON list of
L2-normalized embeddings (one list of floats per text) to stdout. A request may also name
`prompt_name` (else the model's default prompt applies, as in `encode`) and
`truncation_side` ("right" or "left"); a JSON list of requests gets a list of answers, all
from one process.
"""

import os
from typing import Any

from reference_jobs import answer_requests


def embed(request: dict[str, Any], models: dict[str, Any]) -> list[list[float]]:
    """Encodes the request's texts with SentenceTransformer on CPU, normalized."""
    # huggingface_hub reads this once, when it is first imported (through sentence_transformers).
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    model_dir = str(request["model_dir"])
    if model_dir not in models:
        models[model_dir] = SentenceTransformer(model_dir, device="cpu")
    model = models[model_dir]
    model.tokenizer.truncation_side = request.get("truncation_side", "right")
    embeddings = model.encode(
        [str(text) for text in request["texts"]],
        prompt_name=request.get("prompt_name"),
        convert_to_numpy=True,
        normalize_embeddings=True,
    )
    return embeddings.astype("float32").tolist()


def main() -> None:
    """Reads the request or requests, writes the embeddings."""
    answer_requests(embed)


if __name__ == "__main__":
    main()
