"""How the packed embedder runs the rows of one execute call: each row's
attended tokens, and nothing else, packed back to back (packed_encoder.py),
in forwards of at most tokens_per_forward tokens, so a forward's cost is
bounded by the work it carries whatever the rows' count and lengths.

Rows keep their arrival order: without padding, sorting by length saves
nothing. Each forward's rows are packed on the host and copied to the GPU
without waiting (PackedRows.to), so packing overlaps the kernels queued
before it; the only wait is the outputs' copy back. A row without attended
tokens is in no forward; its pooled vector is 0, as in the exported ONNX
graph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from packed_attention import PackedRows
from packed_encoder import PackedEncoder


def forward_spans(lengths: Sequence[int], tokens_per_forward: int) -> list[tuple[int, int]]:
    """Consecutive [start, end) row ranges of at most tokens_per_forward
    tokens each (a row longer than that alone), empty rows included."""
    spans: list[tuple[int, int]] = []
    start, tokens = 0, 0
    for row, length in enumerate(lengths):
        if tokens and tokens + length > tokens_per_forward:
            spans.append((start, row))
            start, tokens = row, 0
        tokens += length
    if start < len(lengths):
        spans.append((start, len(lengths)))
    return spans


# Host-packed rows -> their pooled vectors [rows, hidden] on the encoder's
# device: the encoder itself, or its graphs (packed_graphs.py).
Forward = Callable[[PackedRows], torch.Tensor]


def pack(
    input_ids: torch.Tensor, position_ids: torch.Tensor, attended: torch.Tensor
) -> PackedRows | None:
    """The attended tokens of [rows, length] host rows, row after row, on
    the host; None where no row has any."""
    lengths = attended.sum(dim=1)
    real = lengths[lengths > 0]
    if len(real) == 0:
        return None
    bounds = [0, *torch.cumsum(real, dim=0).tolist()]
    return PackedRows(
        torch.stack([input_ids[attended], position_ids[attended]]),
        torch.tensor(bounds, dtype=torch.int32),
        torch.repeat_interleave(torch.arange(len(real)), real),
        tuple(bounds),
        int(real.max()),
    )


@torch.inference_mode()
def embed_packed(
    encoder: PackedEncoder,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    tokens_per_forward: int,
    forward: Forward | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Embeds [rows, length] host ids and mask and returns float32 host
    arrays, embedding [rows, D] and norm [rows, 1], in the rows' order.
    Position ids are numbered on the padded rows, as the HuggingFace model
    numbers them, so a row pads alike on either side. `forward` runs each
    forward's packed rows; default: the encoder itself."""
    device = encoder.device
    run = forward or (lambda rows: encoder(rows.to(device)))
    ids = torch.from_numpy(input_ids)
    attended = torch.from_numpy(attention_mask) != 0
    positions = encoder.position_ids(ids)
    lengths = attended.sum(dim=1)
    pooled_rows, pooled = [], []
    for start, end in forward_spans(lengths.tolist(), tokens_per_forward):
        rows = slice(start, end)
        packed = pack(ids[rows], positions[rows], attended[rows])
        if packed is None:
            continue
        pooled.append(run(packed))
        pooled_rows.append(start + torch.nonzero(lengths[rows]).flatten())
    vectors = torch.zeros((len(lengths), encoder.hidden_size), device=device)
    if pooled:
        vectors[torch.cat(pooled_rows).to(device)] = torch.cat(pooled)
    embedding, norm = encoder.finish(vectors)
    # One copy back to the host for both outputs.
    both = torch.cat([embedding, norm], dim=1).cpu().numpy()
    return np.ascontiguousarray(both[:, :-1]), np.ascontiguousarray(both[:, -1:])
