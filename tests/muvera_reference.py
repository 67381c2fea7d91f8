"""Print fastembed's MUVERA encodings for the test suite: fastembed (0.9.1, pinned in
requirements/export-no-deps.txt) lives only in the export environment, so tests/test_muvera.py
runs this script with the export venv's python.

Reads a JSON list of `{"vectors": [[float, ...], ...], "role": "query" or "document"}` from
stdin, each with optional "k_sim", "dim_proj", "r_reps" and "seed" (absent: fastembed's own
defaults), and writes per request `fastembed.postprocess.muvera.Muvera(dim, ...)`'s
process_query or process_document of the vectors (float32, [n, dim]) as a list of floats.
"""

from typing import Any

from reference_jobs import answer_requests

PARAMETERS = ("k_sim", "dim_proj", "r_reps")


def encode(request: dict[str, Any], models: dict[Any, Any]) -> list[float]:
    """The request's encoding, one Muvera per parameter set and width for the whole run."""
    import numpy as np
    from fastembed.postprocess import Muvera

    vectors = np.asarray(request["vectors"], dtype=np.float32)
    given = {name: int(request[name]) for name in PARAMETERS if name in request}
    if "seed" in request:
        given["random_seed"] = int(request["seed"])
    key = (vectors.shape[1], tuple(sorted(given.items())))
    if key not in models:
        models[key] = Muvera(vectors.shape[1], **given)
    muvera = models[key]
    role = request["role"]
    if role not in ("query", "document"):
        raise ValueError(f"role {role!r} is neither query nor document")
    encoded = muvera.process_query(vectors) if role == "query" else muvera.process_document(vectors)
    return [float(value) for value in encoded]


def main() -> None:
    answer_requests(encode)


if __name__ == "__main__":
    main()
