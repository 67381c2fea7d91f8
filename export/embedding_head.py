"""The bi-encoder's graph: the encoder, then the model's pooling, its Dense modules and the L2
normalization, returning the embedding and the final vector's norm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from embed_folder import SENTENCE_EMBEDDING, PoolingMode
from model_families import takes_token_type_ids

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAMES = ("embedding", "norm")


class EmbeddingGraph(torch.nn.Module):
    """Transformer encoder + pooling + Dense modules + L2 normalization, as one exportable
    module."""

    input_names = INPUT_NAMES
    output_names = OUTPUT_NAMES

    def __init__(
        self,
        encoder: torch.nn.Module,
        pooling: PoolingMode,
        head: Sequence[torch.nn.Module] = (),
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
        # sentence-transformers' own Dense (and inner Normalize) modules, run as encode() runs
        # them: each reads and writes the features' sentence_embedding.
        self.head = torch.nn.ModuleList(head)
        self.pass_token_type_ids = takes_token_type_ids(encoder)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.token_embeddings(input_ids, attention_mask)
        pooled = self.pool(hidden, attention_mask)
        for module in self.head:
            pooled = module({SENTENCE_EMBEDDING: pooled})[SENTENCE_EMBEDDING]
        norm = pooled.norm(p=2, dim=1, keepdim=True)
        return pooled / norm.clamp_min(1e-12), norm

    def token_embeddings(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        """Runs the encoder and returns its last hidden state as float32."""
        kwargs: dict[str, torch.Tensor] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.pass_token_type_ids:
            kwargs["token_type_ids"] = torch.zeros_like(input_ids)
        # The serving contract is float32 whatever dtype the checkpoint was loaded in.
        return self.encoder(**kwargs).last_hidden_state.to(torch.float32)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Reduces [batch, seq, D] token embeddings to [batch, D]."""
        if self.pooling == "mean":
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        # The first or last attended token, found from the mask alone: the server pads on the
        # right, sentence-transformers pads a decoder's batch on the left, and both must pool the
        # same token. The running count of attended tokens is 1 at the first and the row's total
        # at the last; the flag selects that token by a product and a sum, which keeps the graph
        # to operators every engine runs alike (no index arithmetic, no sentinel values).
        attended = (attention_mask > 0).to(attention_mask.dtype)
        count = torch.cumsum(attended, dim=1)
        target = attended.sum(dim=1, keepdim=True) if self.pooling == "lasttoken" else 1
        selected = (attended * (count == target).to(attended.dtype)).unsqueeze(-1)
        return (hidden * selected.to(hidden.dtype)).sum(dim=1)


def head_modules(model: SentenceTransformer) -> list[torch.nn.Module]:
    """The loaded modules after Pooling that the graph computes: trailing Normalize modules are
    left to the graph's own normalization (whose norm output is the vector's norm before it)."""
    head = list(model)[2:]
    while head and type(head[-1]).__name__ == "Normalize":
        head.pop()
    return head
