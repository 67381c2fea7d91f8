"""The sparse encoder's graph: the masked language model's logits through SpladePooling, as
`activations` [batch, vocab]: log(1 + relu(logits)), padding masked out, then the max (or the
sum) over the sequence."""

from __future__ import annotations

import torch
from model_families import takes_token_type_ids
from sparse_folder import PoolingStrategy

SPARSE_INPUTS = ("input_ids", "attention_mask")
ACTIVATIONS = "activations"


class SparseGraph(torch.nn.Module):
    """Masked language model + SpladePooling, as one exportable module: [batch, seq] ids in,
    [batch, vocab] activations out."""

    input_names = SPARSE_INPUTS
    output_names = (ACTIVATIONS,)

    def __init__(self, mlm: torch.nn.Module, pooling_strategy: PoolingStrategy) -> None:
        super().__init__()
        # Named as EmbeddingGraph's, so onnx_graph.py handles all graphs alike.
        self.encoder = mlm
        self.pooling_strategy = pooling_strategy
        # The tokenizer stage sends one text's ids, all type 0, so the graph makes them itself.
        self.pass_token_type_ids = takes_token_type_ids(mlm)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.pass_token_type_ids:
            kwargs["token_type_ids"] = torch.zeros_like(input_ids)
        # The serving contract is float32 whatever dtype the checkpoint was loaded in.
        logits = self.encoder(**kwargs).logits.to(torch.float32)
        # SpladePooling's order: mask the logits, then relu and log1p, so a padded position is 0,
        # which neither the max (all values are >= 0) nor the sum sees.
        mask = attention_mask.unsqueeze(-1).to(logits.dtype)
        values = torch.log1p(torch.relu(logits * mask))
        if self.pooling_strategy == "max":
            return values.amax(dim=1)
        return values.sum(dim=1)
