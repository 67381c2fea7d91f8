"""Print CrossEncoder.predict's scores, and the ids CrossEncoder feeds the model, for the test
suite: sentence-transformers (and torch) live only in the export environment, so the tests run
this script with the export venv's python.

Reads `{"model_dir": str, "pairs": [[query, document], ...], "prompt_name": str (optional)}` from
stdin (or a JSON list of such requests, answered from one process) and writes `{"scores":
[float, ...], "input_ids": [[int, ...], ...], "token_type_ids": [[int, ...], ...] or null}`, ids
without padding, null where the tokenizer feeds no token type ids. Without prompt_name, predict
applies the model's default prompt, if it has one; the ids are those of the prompted pairs.
"""

import os
from typing import Any

from reference_jobs import answer_requests


def score(request: dict[str, Any], models: dict[str, Any]) -> dict[str, Any]:
    """Scores the request's pairs with CrossEncoder on CPU, and tokenizes them as it does."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sentence_transformers import CrossEncoder

    model_dir = str(request["model_dir"])
    if model_dir not in models:
        models[model_dir] = CrossEncoder(model_dir, device="cpu")
    model = models[model_dir]
    pairs = [(str(query), str(document)) for query, document in request["pairs"]]
    prompt_name = request.get("prompt_name")
    scores = model.predict(
        pairs, prompt_name=prompt_name, convert_to_numpy=True, show_progress_bar=False
    )
    prompt = model.prompts.get(prompt_name or model.default_prompt_name or "", "")
    features = model.preprocess([(prompt + query, document) for query, document in pairs])
    masks = features["attention_mask"].tolist()

    def unpadded(name: str) -> list[list[int]] | None:
        if name not in features:
            return None
        rows = features[name].tolist()
        return [
            [value for value, kept in zip(row, mask, strict=True) if kept]
            for row, mask in zip(rows, masks, strict=True)
        ]

    return {
        "scores": scores.astype("float32").tolist(),
        "input_ids": unpadded("input_ids"),
        "token_type_ids": unpadded("token_type_ids"),
    }


def main() -> None:
    """Reads the request or requests, writes the answers."""
    answer_requests(score)


if __name__ == "__main__":
    main()
