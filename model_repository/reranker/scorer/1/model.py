"""Triton Python model: a pair's token ids -> the cross-encoder's relevance
score, running the exported ONNX graph (1/model.onnx) under ONNX Runtime
(model_common.onnx_rows says how requests are checked and run)."""

from __future__ import annotations

from model_common.onnx_rows import OnnxRows
from model_common.tensors import ATTENTION_MASK, INPUT_IDS, SCORE, TOKEN_TYPE_IDS, StageIO


class TritonPythonModel(OnnxRows):
    # Every pair tokenizer's outputs: the graph takes token type ids only
    # where its model has segments (its export record's `inputs`).
    io = StageIO(inputs=(INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS), outputs=(SCORE,))
