"""Profile the PyTorch embedder's packed encoder (model_repository/
torch_gpu/embedder/1/packed_encoder.py) with perf/gpu/profile.py, for the
test suite.

torch lives only in the export environment, so the tests run this script
with the export venv's python. Reads a request `{"model_dir", "pooling",
"tokens_per_forward", "input_ids", "attention_mask", "repeats"}` from
stdin, profiles embed_packed on those rows on CPU in float32, and writes
`{"table": kernel_table's result, "lines": table_lines' markdown}` to
stdout.
"""

import json
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ENCODER_DIR = REPO_ROOT / "model_repository" / "torch_gpu" / "embedder" / "1"


def main() -> None:
    """Reads the request, profiles, writes the table."""
    # A script's sys.path starts at its own folder, not the working
    # directory: the repository root is needed for perf.gpu.profile.
    sys.path[:0] = [str(ENCODER_DIR), str(REPO_ROOT)]
    import numpy as np
    import torch
    from packed_encoder import load_encoder
    from packed_rows import embed_packed

    from perf.gpu.profile import kernel_table, table_lines

    request = json.load(sys.stdin)
    device = torch.device("cpu")
    encoder = load_encoder(Path(request["model_dir"]), request["pooling"], device, torch.float32)
    input_ids = np.array(request["input_ids"], dtype=np.int64)
    attention_mask = np.array(request["attention_mask"], dtype=np.int64)
    budget = int(request["tokens_per_forward"])
    table = kernel_table(
        lambda: embed_packed(encoder, input_ids, attention_mask, budget),
        device,
        int(request["repeats"]),
    )
    json.dump({"table": table, "lines": table_lines(table)}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
