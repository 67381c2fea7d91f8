"""Triton Python model: a pair's token ids -> the cross-encoder's relevance
score, running the exported ONNX graph (1/model.onnx) under ONNX Runtime
(model_common.onnx_rows says how requests are checked and run)."""

from __future__ import annotations

from model_common.onnx_rows import OnnxRows


class TritonPythonModel(OnnxRows):
    graph_output = "score"
    triton_output = "SCORE"
