"""Triton Python model: token ids -> unit-length embedding and its norm,
running the exported ONNX graph (1/model.onnx) under ONNX Runtime.

Each request arrives padded to its own longest row, and ragged batching lets
requests of different lengths share one execute call; the call's rows run
in length-sorted groups (model_common.rows), one group after another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnxruntime as ort
from model_common.embedder import GroupedEmbedder
from model_common.embedder_setup import EmbedderSetup
from model_common.graph_tensors import onnxruntime_tensors
from model_common.rows import Embeddings, Tokens, groups_by_tokens
from model_common.tensors import EMBEDDER_IO
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

_FEEDS = [tensor.graph_name for tensor in EMBEDDER_IO.inputs]
_READS = [tensor.graph_name for tensor in EMBEDDER_IO.outputs]


class TritonPythonModel(GroupedEmbedder):
    run_errors = (Fail, InvalidArgument, RuntimeException)

    def _open(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        self._tokens_per_run = setup.integer("tokens_per_run")
        options = ort.SessionOptions()
        options.intra_op_num_threads = setup.integer("intra_op_num_threads")
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(
            str(setup.version_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self._check_graph(
            "model.onnx",
            onnxruntime_tensors(self._session),
            EMBEDDER_IO.inputs,
            EMBEDDER_IO.outputs,
        )

    def _cut_groups(self, lengths: np.ndarray) -> list[np.ndarray]:
        # One session runs the groups in turn: no parallel runs to feed.
        return groups_by_tokens(lengths, self._tokens_per_run, 1)

    def _run_groups(self, groups: Sequence[Tokens]) -> list[Embeddings]:
        results = []
        for input_ids, attention_mask in groups:
            embedding, norm = self._session.run(
                _READS, dict(zip(_FEEDS, (input_ids, attention_mask), strict=True))
            )
            results.append((embedding, norm))
        return results
