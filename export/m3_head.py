"""BGE-M3's graph: one XLM-RoBERTa pass and FlagEmbedding's three heads on its last hidden
states, as the graph tensors the serving stages read (model_common.tensors):

- `embedding` [batch, hidden] and `norm` [batch, 1]: the CLS token's hidden state, L2-normalized,
  and its norm before, exactly as the bi-encoder's graph gives them (embedding_head.py);
- `activations` [batch, vocab]: per token id, the max over the row's attended positions holding
  it of relu(sparse_linear(h)), 0 for the special tokens FlagEmbedding skips: a row's nonzero
  entries are BGEM3FlagModel's lexical weights;
- `token_vectors` [batch, seq, colbert_dim]: colbert_linear(h) L2-normalized at every attended
  position, 0 at padding; position 0 (the CLS) included, which the serving stage drops as
  BGEM3FlagModel does.

The max per token id is one ScatterElements with reduction max, which ONNX has from opset 18
(M3_OPSET, the task export's opset: export_onnx.py refuses a lower one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from embedding_head import EmbeddingGraph
from model_common.tensors import (
    ACTIVATIONS,
    ATTENTION_MASK,
    EMBEDDING,
    INPUT_IDS,
    NORM,
    TOKEN_VECTORS,
)

M3_OPSET = 18
M3_INPUTS = (INPUT_IDS.graph_name, ATTENTION_MASK.graph_name)
M3_OUTPUTS = tuple(tensor.graph_name for tensor in (EMBEDDING, NORM, ACTIVATIONS, TOKEN_VECTORS))


class ScatterMax(torch.autograd.Function):
    """`values` [batch, seq] scattered into `base` [batch, vocab] at `indices` along the rows,
    each entry the max of those landing on it. Exported as one ScatterElements, not the
    exporter's rank test around it, whose branches' shapes ONNX Runtime warns of on every run."""

    @staticmethod
    def forward(
        ctx: object, base: torch.Tensor, indices: torch.Tensor, values: torch.Tensor
    ) -> torch.Tensor:
        return base.scatter_reduce(1, indices, values, reduce="amax")

    @staticmethod
    def symbolic(g: Any, base: torch.Value, indices: torch.Value, values: torch.Value) -> Any:
        # g: the TorchScript exporter's graph context; the export asks for M3_OPSET at least.
        return g.op("ScatterElements", base, indices, values, axis_i=1, reduction_s="max")


class M3Graph(EmbeddingGraph):
    """Encoder + BGE-M3's dense, sparse and ColBERT heads, as one exportable module: [batch,
    seq] ids in, the four outputs of M3_OUTPUTS out."""

    input_names = M3_INPUTS
    output_names = M3_OUTPUTS

    def __init__(
        self,
        encoder: torch.nn.Module,
        sparse_linear: torch.nn.Module,
        colbert_linear: torch.nn.Module,
        vocab_size: int,
        skipped_token_ids: Sequence[int],
    ) -> None:
        # CLS pooling, no Dense: the bi-encoder graph's dense vector and norm.
        super().__init__(encoder, "cls")
        self.sparse_linear = sparse_linear
        self.colbert_linear = colbert_linear
        # Per token id, 0 where FlagEmbedding leaves its weight out, else 1.
        kept = torch.ones(vocab_size)
        kept[list(skipped_token_ids)] = 0.0
        self.register_buffer("kept_ids", kept, persistent=False)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = self.token_embeddings(input_ids, attention_mask)
        mask = attention_mask.to(hidden.dtype)
        pooled = self.pool(hidden, attention_mask)
        norm = pooled.norm(p=2, dim=1, keepdim=True)
        # Padding weighs 0, which the max over relu's values (all >= 0) ignores.
        weights = torch.relu(self.sparse_linear(hidden)).squeeze(-1) * mask
        base = torch.zeros(
            (input_ids.shape[0], self.kept_ids.shape[0]), dtype=weights.dtype, device=weights.device
        )
        activations = ScatterMax.apply(base, input_ids, weights) * self.kept_ids
        vectors = self.colbert_linear(hidden) * mask.unsqueeze(-1)
        token_vectors = vectors / vectors.norm(p=2, dim=-1, keepdim=True).clamp_min(1e-12)
        return pooled / norm.clamp_min(1e-12), norm, activations, token_vectors
