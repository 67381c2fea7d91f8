"""Triton Python model: token ids -> unit-length embedding and its norm,
running the exported ONNX graph (1/model.onnx) under ONNX Runtime.

Each request arrives padded to its own longest row, and ragged batching lets
requests of different lengths share one execute call; the call's rows run
in length-sorted groups (model_common.rows), one group after another.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort
from model_common.rows import Embeddings, Tokens, groups_by_tokens
from model_common.triton import GroupedEmbedder
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

# What ONNX Runtime raises when a request's values break the graph.
_RUN_ERRORS = (Fail, InvalidArgument, RuntimeException)


class TritonPythonModel(GroupedEmbedder):
    def initialize(self, args: dict[str, str]) -> None:
        setup = self._set_up(args, _RUN_ERRORS)
        self._tokens_per_run = setup.integer("tokens_per_run")

        options = ort.SessionOptions()
        options.intra_op_num_threads = setup.integer("intra_op_num_threads")
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(
            str(setup.version_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def _cut_groups(self, lengths: np.ndarray) -> list[np.ndarray]:
        # One session runs the groups in turn: no parallel runs to feed.
        return groups_by_tokens(lengths, self._tokens_per_run, 1)

    def _run_groups(self, groups: Sequence[Tokens]) -> list[Embeddings]:
        results = []
        for input_ids, attention_mask in groups:
            embedding, norm = self._session.run(
                ["embedding", "norm"], {"input_ids": input_ids, "attention_mask": attention_mask}
            )
            results.append((embedding, norm))
        return results
