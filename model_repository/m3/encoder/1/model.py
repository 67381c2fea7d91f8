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
from model_common.merged_runs import request_splits
from model_common.onnx_rows import Checked, Feeds, GraphStage, stack_feeds
from model_common.request_io import triton_tensor
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
        """Each request's graph outputs; its token vectors as wide as the batch's longest row."""
        merged = self._run_grouped(stack_feeds(batch))
        splits = request_splits([len(feeds[_IDS]) for feeds in batch])
        return [
            list(parts)
            for parts in zip(*(np.split(array, splits) for array in merged), strict=True)
        ]

    def _respond(self, item: Checked, result: list[np.ndarray]) -> pb_utils.InferenceResponse:
        _, feeds = item
        *rows, vectors = result
        # Past the batch's longest row and the request's own width there are no tokens.
        width = min(vectors.shape[1], feeds[_MASK].shape[1])
        served = feeds[_MASK][:, :width].copy()
        served[:, 0] = 0
        tensors = [
            triton_tensor(tensor, array)
            for tensor, array in zip(_OUTPUTS, [*rows, vectors[:, :width]], strict=True)
        ]
        return pb_utils.InferenceResponse(
            output_tensors=[*tensors, triton_tensor(SERVED_MASK, served)]
        )
