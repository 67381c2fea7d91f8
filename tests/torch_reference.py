"""Run the PyTorch embedder's packed encoder (model_repository/torch_gpu/
embedder/1/packed_encoder.py, packed_rows.py) for the test suite.

torch lives only in the export environment, so the tests run this script
with the export venv's python. Reads a request
`{"model_dir", "pooling", "device", "tokens_per_forward", "input_ids", "attention_mask"}`
(ids and mask as lists of equal-length rows; device "cpu" runs float32,
"cuda" float16, as the Triton model does; optional "token_buckets", the
config's cuda_graph_tokens string, and "max_rows" run each forward padded
to its bucket, captured on CUDA), or a JSON list of them, from
stdin and writes `{"embedding": [[...]], "norm": [[...]], "forwards": N,
"attention": NAME}` (or a list of those, each encoder loaded once) to
stdout. A model the encoder refuses fails the script with its message.
"""

import sys
from pathlib import Path
from typing import Any

from reference_jobs import answer_requests

ENCODER_DIR = (
    Path(__file__).resolve().parent.parent / "model_repository" / "torch_gpu" / "embedder" / "1"
)


def embed(request: dict[str, Any], encoders: dict[tuple[str, str, str], Any]) -> dict[str, Any]:
    """Embeds one request's rows, loading its encoder unless already loaded."""
    import numpy as np
    import torch
    from packed_encoder import load_encoder
    from packed_graphs import BucketedEncoder, parse_buckets
    from packed_rows import embed_packed, forward_spans

    device = torch.device(request["device"])
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    key = (request["model_dir"], request["pooling"], request["device"])
    if key not in encoders:
        encoders[key] = load_encoder(Path(key[0]), request["pooling"], device, dtype)
    encoder = encoders[key]
    input_ids = np.array(request["input_ids"], dtype=np.int64)
    attention_mask = np.array(request["attention_mask"], dtype=np.int64)
    budget = int(request["tokens_per_forward"])
    buckets = parse_buckets(request.get("token_buckets", ""), budget)
    forward = None
    if buckets:
        forward = BucketedEncoder(encoder, buckets, int(request["max_rows"]))
        if device.type == "cuda":
            forward.capture()
    embedding, norm = embed_packed(encoder, input_ids, attention_mask, budget, forward)
    lengths = (attention_mask != 0).sum(axis=1).tolist()
    return {
        "embedding": embedding.tolist(),
        "norm": norm.tolist(),
        "forwards": len(forward_spans(lengths, budget)),
        "attention": encoder.attention_name,
    }


def main() -> None:
    """Reads the request or requests, embeds, writes the results."""
    sys.path.insert(0, str(ENCODER_DIR))
    answer_requests(embed)


if __name__ == "__main__":
    main()
