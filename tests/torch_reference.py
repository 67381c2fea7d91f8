"""Run the PyTorch embedder's encoder (model_repository/torch_gpu/embedder/1/
sentence_encoder.py) on CPU for the test suite.

torch lives only in the export environment, so tests/test_torch_embedder.py
runs this script with the export venv's python. Reads
`{"model_dir", "pooling", "device", "rows_per_run", "input_ids", "attention_mask"}`
(ids and mask as lists of equal-length rows; device "cpu" runs float32, "cuda"
float16, as the Triton model does) from stdin and writes
`{"embedding": [[...]], "norm": [[...]]}` to stdout.
"""

import json
import sys
from pathlib import Path
from typing import Any

ENCODER_DIR = (
    Path(__file__).resolve().parent.parent / "model_repository" / "torch_gpu" / "embedder" / "1"
)


def main() -> None:
    """Reads the request, embeds it, writes the result."""
    sys.path.insert(0, str(ENCODER_DIR))
    import torch
    from sentence_encoder import embed_in_groups, load_encoder

    request: dict[str, Any] = json.load(sys.stdin)
    device = torch.device(request["device"])
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    encoder = load_encoder(Path(request["model_dir"]), request["pooling"], device, dtype)
    embedding, norm = embed_in_groups(
        encoder,
        torch.tensor(request["input_ids"], dtype=torch.int64),
        torch.tensor(request["attention_mask"], dtype=torch.int64),
        int(request["rows_per_run"]),
    )
    json.dump({"embedding": embedding.tolist(), "norm": norm.tolist()}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
