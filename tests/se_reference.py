"""Print SparseEncoder.encode's rows for the test suite: sentence-transformers (and torch) live
only in the export environment, so the tests run this script with the export venv's python.

Reads `{"model_dir": str, "texts": [str, ...], "prompt_name": str (optional), "max_active_dims":
int (optional)}` from stdin (or a JSON list of such requests, answered from one process) and
writes, per text, `{"indices": [int, ...], "values": [float, ...]}`: the terms whose value is
> 0, indices ascending, float32 values. As SparseEncoder.encode takes them: without prompt_name
the model's default_prompt_name applies (if it has one), without max_active_dims the model's own
(config_sentence_transformers.json's, else every term).
"""

import os
from typing import Any

from reference_jobs import answer_requests


def encode(request: dict[str, Any], models: dict[str, Any]) -> list[dict[str, list[Any]]]:
    """Encodes the request's texts with SparseEncoder on CPU; returns each row's active terms."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SparseEncoder

    model_dir = str(request["model_dir"])
    if model_dir not in models:
        models[model_dir] = SparseEncoder(model_dir, device="cpu")
    rows = models[model_dir].encode(
        [str(text) for text in request["texts"]],
        prompt_name=request.get("prompt_name"),
        max_active_dims=request.get("max_active_dims"),
        convert_to_tensor=True,
        show_progress_bar=False,
    )
    answers = []
    for row in rows.to_dense().to(torch.float32):
        (indices,) = torch.nonzero(row > 0, as_tuple=True)
        answers.append({"indices": indices.tolist(), "values": row[indices].tolist()})
    return answers


def main() -> None:
    """Reads the request or requests, writes the answers."""
    answer_requests(encode)


if __name__ == "__main__":
    main()
