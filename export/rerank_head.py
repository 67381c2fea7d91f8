"""The reranker's graph: the sequence classifier on a (query, document) pair's ids, its one logit
through the activation the folder names (sigmoid or identity), as `score`."""

from __future__ import annotations

import torch
from model_families import pair_token_types
from rerank_folder import Activation

SCORE = "score"
PAIR_INPUTS = ("input_ids", "attention_mask")


class RerankGraph(torch.nn.Module):
    """Sequence classifier + activation, as one exportable module: [batch, seq] pairs in,
    [batch, 1] scores out."""

    def __init__(self, classifier: torch.nn.Module, activation: Activation) -> None:
        super().__init__()
        # Named as EmbeddingGraph's, so onnx_graph.py handles both alike.
        self.encoder = classifier
        self.activation = activation
        # A pair's segment ids go in where the model tells the segments apart; otherwise the
        # model takes its own all-0 default, which is what CrossEncoder feeds it.
        self.takes_token_types = pair_token_types(classifier)
        self.input_names = PAIR_INPUTS + (("token_type_ids",) if self.takes_token_types else ())
        self.output_names = (SCORE,)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        # The serving contract is float32 whatever dtype the checkpoint was loaded in.
        logits = self.encoder(**kwargs).logits.to(torch.float32)
        return torch.sigmoid(logits) if self.activation == "sigmoid" else logits
