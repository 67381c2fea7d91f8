"""The multi-vector encoder's graph: the encoder's last hidden states, then the folder's Dense
projections and Normalize in modules.json's order, as `token_vectors` [batch, seq, D]: a vector
at every position, of which the served stages keep those the rows' vector mask names (the
MultiVectorMask's choice, made by model_common.multivector outside the graph)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from model_families import takes_token_type_ids
from multivector_folder import TOKEN_EMBEDDINGS

MULTIVECTOR_INPUTS = ("input_ids", "attention_mask")
TOKEN_VECTORS = "token_vectors"


class MultiVectorGraph(torch.nn.Module):
    """Encoder + token-level projections and normalization, as one exportable module: [batch,
    seq] ids in, [batch, seq, D] vectors out. `rows` are the record's row settings
    (multivector_rows.row_settings), what the graph's inputs are built with."""

    input_names = MULTIVECTOR_INPUTS
    output_names = (TOKEN_VECTORS,)

    def __init__(
        self, encoder: torch.nn.Module, head: Sequence[torch.nn.Module], rows: dict[str, Any]
    ) -> None:
        super().__init__()
        # Named as EmbeddingGraph's, so onnx_graph.py handles all graphs alike.
        self.encoder = encoder
        # sentence-transformers' own Dense and Normalize modules, run as encode() runs them: each
        # reads and writes the features' token_embeddings.
        self.head = torch.nn.ModuleList(head)
        self.rows = rows
        # The tokenizer stage sends one text's ids, all type 0, so the graph makes them itself.
        self.pass_token_type_ids = takes_token_type_ids(encoder)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.pass_token_type_ids:
            kwargs["token_type_ids"] = torch.zeros_like(input_ids)
        # The serving contract is float32 whatever dtype the checkpoint was loaded in.
        vectors = self.encoder(**kwargs).last_hidden_state.to(torch.float32)
        for module in self.head:
            vectors = module({TOKEN_EMBEDDINGS: vectors})[TOKEN_EMBEDDINGS]
        return vectors
