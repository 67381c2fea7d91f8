"""Print sentence-transformers reference embeddings for the test suite.

This exists because sentence-transformers (and torch) live only in the export environment,
not in the serving/test environment: the tests run this script with the export venv's python.

Reads `{"model_dir": str, "texts": [str, ...]}` from stdin and writes a JSON list of
L2-normalized embeddings (one list of floats per text) to stdout.
"""

import json
import os
import sys
from typing import Any


def read_request() -> tuple[str, list[str]]:
    """Parses the JSON request on stdin."""
    request: dict[str, Any] = json.load(sys.stdin)
    return str(request["model_dir"]), [str(text) for text in request["texts"]]


def embed(model_dir: str, texts: list[str]) -> list[list[float]]:
    """Encodes texts with SentenceTransformer on CPU, normalized."""
    # huggingface_hub reads this once, when it is first imported (through sentence_transformers).
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_dir, device="cpu")
    embeddings = model.encode(texts, convert_to_numpy=True, normalize_embeddings=True)
    return embeddings.astype("float32").tolist()


def main() -> None:
    """Reads the request, writes the embeddings."""
    model_dir, texts = read_request()
    json.dump(embed(model_dir, texts), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
