"""Triton Python model: a text's token ids -> BGE-M3's three outputs from one
pass of the exported ONNX graph (1/model.onnx) under ONNX Runtime
(model_common.onnx_rows says how requests are checked and run): the dense
vector (CLS, unit length) and its norm, the sparse head's weight per
vocabulary entry (zero for the special tokens and the absent ones), and each
position's ColBERT vector. SERVED_MASK serves every token's vector but the
first, as BGEM3FlagModel drops the CLS's.

The ensemble's serializers write each output a request asks for; Triton
skips those of the outputs it does not ask for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import triton_python_backend_utils as pb_utils
from model_common.onnx_rows import Checked, Feeds, GraphStage, stack_feeds
from model_common.request_io import triton_tensor
from model_common.rows import groups_by_tokens, real_lengths
from model_common.tensors import (
    ACTIVATIONS,
    ATTENTION_MASK,
    EMBEDDING,
    INPUT_IDS,
    NORM,
    SERVED_MASK,
    TOKEN_VECTORS,
    StageIO,
)

_IDS, _MASK = INPUT_IDS.graph_name, ATTENTION_MASK.graph_name
# The graph's outputs, in the order the stage reads them.
_OUTPUTS = (EMBEDDING, NORM, ACTIVATIONS, TOKEN_VECTORS)


class TritonPythonModel(GraphStage[list[np.ndarray]]):
    io = StageIO(inputs=(INPUT_IDS, ATTENTION_MASK), outputs=(*_OUTPUTS, SERVED_MASK))

    def _run_requests(self, batch: Sequence[Feeds]) -> list[list[np.ndarray]]:
        """Each request's graph outputs, its token vectors as wide as its rows; the batch's rows
        run in length-sorted groups, each cut to its longest."""
        stacked = stack_feeds(batch)
        lengths = real_lengths(stacked[_MASK])
        groups = groups_by_tokens(lengths, self._tokens_per_run, 1)
        merged: list[np.ndarray] = []
        for group in groups:
            length = int(lengths[group].max())
            outputs = self._run_outputs(
                {name: rows[group, :length] for name, rows in stacked.items()}
            )
            if not merged:
                # Token vectors are [rows, positions, dimensions]: as wide as the widest row.
                shapes = [(len(lengths), *output.shape[1:]) for output in outputs]
                vectors = _OUTPUTS.index(TOKEN_VECTORS)
                shapes[vectors] = (len(lengths), stacked[_IDS].shape[1], outputs[vectors].shape[2])
                merged = [np.zeros(shape, np.float32) for shape in shapes]
            for into, output in zip(merged, outputs, strict=True):
                into[(group, *(slice(0, size) for size in output.shape[1:]))] = output
        starts = np.cumsum([0, *(len(feeds[_IDS]) for feeds in batch)])
        return [
            [
                array[start:end, : feeds[_IDS].shape[1]] if array.ndim == 3 else array[start:end]
                for array in merged
            ]
            for start, end, feeds in zip(starts[:-1], starts[1:], batch, strict=True)
        ]

    def _respond(self, item: Checked, result: list[np.ndarray]) -> pb_utils.InferenceResponse:
        _, feeds = item
        served = feeds[_MASK].copy()
        served[:, 0] = 0
        tensors = [
            triton_tensor(tensor, array) for tensor, array in zip(_OUTPUTS, result, strict=True)
        ]
        return pb_utils.InferenceResponse(
            output_tensors=[*tensors, triton_tensor(SERVED_MASK, served)]
        )
