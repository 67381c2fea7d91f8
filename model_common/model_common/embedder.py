"""The stages that answer token ids with embeddings (every engine's
embedder, and the TensorRT repository's checks in front of its engine):
the stage base (model_common.stage) with an embedder's tensors, checks and
run; importable only inside a Triton Python-backend stub."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar, TypeVar

import numpy as np
import triton_python_backend_utils as pb_utils

from model_common.door import WorkCounter
from model_common.embedder_setup import EmbedderSetup
from model_common.merged_runs import request_splits, run_merged
from model_common.request_io import read_tokens, triton_tensor
from model_common.rows import Embeddings, Tokens, embed_in_groups
from model_common.stage import Stage
from model_common.tensors import EMBEDDER_IO, EMBEDDING, NORM
from model_common.tokens import stack_tokens

Result = TypeVar("Result")


class EmbeddingStage(Stage[Tokens, Result]):
    """Fed token ids (by the tokenizer, or by `embed_tokens` clients), each
    request checked as every embedder checks it (model_common.tokens, the
    output options) against the limits of its setup; `_open` loads the rest."""

    io = EMBEDDER_IO
    admission = WorkCounter

    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        self._dims = setup.dims
        self._limits = setup.limits
        self._open(args, setup)

    @abstractmethod
    def _open(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        """Loads what runs the model."""

    def _decode(self, request: pb_utils.InferenceRequest) -> Tokens | pb_utils.TritonError:
        return read_tokens(request, self._limits, self._dims)

    def _tokens(self, batch: list[Tokens]) -> int:
        return sum(int(attention_mask.sum()) for _, attention_mask in batch)


class Embedder(EmbeddingStage[Embeddings]):
    """An embedder whose engine runs in this process: the call's rows
    embedded together by `_embed_rows` (model_common.merged_runs)."""

    # What the engine raises when a request's values break the graph.
    run_errors: ClassVar[tuple[type[Exception], ...]] = ()

    def _run(self, batch: list[Tokens]) -> list[Embeddings | pb_utils.TritonError]:
        return run_merged(batch, self._embed_requests, self.run_errors)

    def _embed_requests(self, batch: Sequence[Tokens]) -> list[Embeddings]:
        embedding, norm = self._embed_rows(*stack_tokens(list(batch)))
        splits = request_splits([input_ids.shape[0] for input_ids, _ in batch])
        return list(zip(np.split(embedding, splits), np.split(norm, splits), strict=True))

    def _respond(self, item: Tokens, result: Embeddings) -> pb_utils.InferenceResponse:
        embedding, norm = result
        return pb_utils.InferenceResponse(
            output_tensors=[triton_tensor(EMBEDDING, embedding), triton_tensor(NORM, norm)]
        )

    @abstractmethod
    def _embed_rows(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> Embeddings:
        """The rows' embeddings and norms, in the rows' order."""


class GroupedEmbedder(Embedder):
    """An embedder that runs each call's rows in length-sorted groups
    (model_common.rows), cut by `_cut_groups` and run by `_run_groups`."""

    def _embed_rows(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> Embeddings:
        return embed_in_groups(
            input_ids, attention_mask, self._dims, self._cut_groups, self._run_groups
        )

    @abstractmethod
    def _cut_groups(self, lengths: np.ndarray) -> list[np.ndarray]:
        """The rows of each group, from the rows' real lengths."""

    @abstractmethod
    def _run_groups(self, groups: Sequence[Tokens]) -> list[Embeddings]:
        """Each group's embeddings and norms, in order."""
