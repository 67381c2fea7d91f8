"""Print MultiVectorEncoder.encode_query's or encode_document's vectors for the test suite:
sentence-transformers (and torch) live only in the export environment, so the tests run this
script with the export venv's python.

Reads `{"model_dir": str, "role": "query" or "document", "texts": [str, ...]}` from stdin (or a
JSON list of such requests, answered from one process) and writes, per text, its vectors as
`[[float, ...], ...]` (float32 values, one list per vector, as many as the role's scoring mask
keeps), each text with the role's own prompt, as encode_query and encode_document apply it.
A request `{"model_dir": str, "query": str, "documents": [str, ...]}` gets instead the query's
MaxSim score against each document, as MultiVectorEncoder.similarity gives it. A request's
optional "pool_factor" pools its documents as encode_document's per-call
`token_pooling=HierarchicalTokenPooling(pool_factor=...)` does (a query's encoding ignores it,
as the pooling's default tasks do), on top of the folder's own pooling module where its pipeline
holds one, as encode_document compounds them.
"""

import os
from typing import Any

from reference_jobs import answer_requests


def encode(request: dict[str, Any], models: dict[str, Any]) -> list[Any]:
    """Encodes the request's texts as its role with MultiVectorEncoder on CPU, or scores its
    query against its documents."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import numpy as np
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling

    model_dir = str(request["model_dir"])
    if model_dir not in models:
        models[model_dir] = MultiVectorEncoder(model_dir, device="cpu")
    model = models[model_dir]
    factor = request.get("pool_factor")
    pooling = None if factor is None else HierarchicalTokenPooling(pool_factor=float(factor))
    if "query" in request:
        queries = model.encode_query([str(request["query"])], show_progress_bar=False)
        documents = model.encode_document(
            [str(text) for text in request["documents"]],
            show_progress_bar=False,
            token_pooling=pooling,
        )
        return [float(score) for score in model.similarity(queries, documents)[0]]
    role = str(request["role"])
    if role not in ("query", "document"):
        raise ValueError(f"role {role!r} is neither query nor document")
    encode_role = model.encode_query if role == "query" else model.encode_document
    vectors = encode_role(
        [str(text) for text in request["texts"]],
        convert_to_numpy=True,
        show_progress_bar=False,
        token_pooling=pooling,
    )
    return [np.asarray(each, dtype=np.float32).tolist() for each in vectors]


def main() -> None:
    """Reads the request or requests, writes the answers."""
    answer_requests(encode)


if __name__ == "__main__":
    main()
