"""Bidirectional self-attention over packed sequences: query, key and value
[tokens, heads, head_dim] holding several sequences back to back, bounded by
cumulative sequence lengths, each token attending only within its own
sequence.

On CUDA in float16 or bfloat16 it runs torch's variable-length flash
attention (torch.nn.attention.varlen, torch >= 2.10), one kernel for the
whole pack. Elsewhere (CPU, float32, an older torch) it runs
scaled_dot_product_attention on each sequence in turn: the same result,
one call per sequence.

A pack may be padded to a fixed shape (packed_graphs.py): spare tokens
after the real ones, in no sequence, and spare rows of no tokens. Neither
attention reads the spare tokens, and nothing pools them into a real row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib.util import find_spec

import torch
from torch.nn import functional


@dataclass(frozen=True)
class PackedRows:
    """The non-empty rows of one forward, packed: built on the host, run on
    the encoder's device (to)."""

    tokens: torch.Tensor  # [2, T] int64: token ids, then position ids
    # [rows + 1] int32: where each row starts, then the real token count
    # (repeated for a padded pack's spare rows).
    cu_seqlens: torch.Tensor
    # [T] int64: each token's row (a padded pack's spare tokens: one past
    # the last row), for mean pooling.
    row_of_token: torch.Tensor
    bounds: tuple[int, ...]  # the real rows' cu_seqlens, on the host
    max_length: int  # the longest row, or more: the attention kernel's bound

    # The fields a forward reads on the device.
    DEVICE_FIELDS = ("tokens", "cu_seqlens", "row_of_token")

    @property
    def real_rows(self) -> int:
        return len(self.bounds) - 1

    def to(self, device: torch.device) -> PackedRows:
        """On `device`. To CUDA through pinned host memory without waiting:
        the host goes on packing the next forward while the copy and the
        kernels queued before it run."""
        if device.type != "cuda":
            return self
        return replace(
            self,
            **{
                name: getattr(self, name).pin_memory().to(device, non_blocking=True)
                for name in self.DEVICE_FIELDS
            },
        )


# (query, key, value, the rows they hold) -> context
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, PackedRows], torch.Tensor]

# The dtypes and head widths torch's flash kernels take.
_VARLEN_DTYPES = (torch.float16, torch.bfloat16)
_VARLEN_MAX_HEAD_DIM = 256


def _varlen(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, rows: PackedRows
) -> torch.Tensor:
    from torch.nn.attention.varlen import varlen_attn

    # Positional arguments only: the keywords after max_k changed between
    # torch releases, and the defaults (no mask, 1/sqrt(head_dim) scale)
    # are what an encoder needs.
    longest = rows.max_length
    return varlen_attn(query, key, value, rows.cu_seqlens, rows.cu_seqlens, longest, longest)


def _per_sequence(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, rows: PackedRows
) -> torch.Tensor:
    # Zeros where a padded pack's spare tokens are.
    context = torch.zeros_like(query)
    for start, end in zip(rows.bounds[:-1], rows.bounds[1:], strict=True):
        # [length, heads, head_dim] -> [heads, length, head_dim] and back.
        parts = (tensor[start:end].transpose(0, 1) for tensor in (query, key, value))
        context[start:end] = functional.scaled_dot_product_attention(*parts).transpose(0, 1)
    return context


def varlen_available() -> bool:
    """Whether this torch has variable-length attention."""
    return find_spec("torch.nn.attention.varlen") is not None


def select_attention(
    device: torch.device, dtype: torch.dtype, head_dim: int
) -> tuple[str, Attention]:
    """The attention for an encoder on device in dtype, and its name."""
    flash_shape = head_dim % 8 == 0 and head_dim <= _VARLEN_MAX_HEAD_DIM
    if device.type == "cuda" and dtype in _VARLEN_DTYPES and flash_shape and varlen_available():
        return "varlen_attn", _varlen
    return "sdpa_per_sequence", _per_sequence
