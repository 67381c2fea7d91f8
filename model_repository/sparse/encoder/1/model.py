"""Triton Python model: a text's token ids -> the sparse encoder's
vocabulary-wide activations (log(1 + relu(logits)) pooled over the text, in
the graph), running the exported ONNX graph (1/model.onnx) under ONNX
Runtime (model_common.onnx_rows says how requests are checked and run). The
serializer behind it writes only each row's active entries, the largest
max_active_dims where a request asks; where it does not and the model has a
default (its record's max_active_dims, as SparseEncoder.encode applies it),
the rest are zeroed here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import triton_python_backend_utils as pb_utils
from model_common.embedder_setup import EmbedderSetup
from model_common.onnx_rows import OnnxRows
from model_common.rows import keep_largest
from model_common.tensors import ACTIVATIONS, ATTENTION_MASK, INPUT_IDS, StageIO

# The request parameter that keeps the k largest values (the serializer's).
_MAX_ACTIVE_DIMS = "max_active_dims"


class TritonPythonModel(OnnxRows):
    io = StageIO(inputs=(INPUT_IDS, ATTENTION_MASK), outputs=(ACTIVATIONS,))

    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        super()._set_up(args, setup)
        default = self._fields.get(_MAX_ACTIVE_DIMS)
        self._default_kept = None if default is None else int(str(default))

    def _finish(self, rows: np.ndarray, request: pb_utils.InferenceRequest) -> np.ndarray:
        if self._default_kept is None or _MAX_ACTIVE_DIMS in json.loads(request.parameters()):
            return rows
        return keep_largest(rows, self._default_kept)
