"""Triton Python model: a text's token ids -> the sparse encoder's
vocabulary-wide activations (log(1 + relu(logits)) pooled over the text, in
the graph), running the exported ONNX graph (1/model.onnx) under ONNX
Runtime (model_common.onnx_rows says how requests are checked and run). The
serializer behind it writes only each row's active entries."""

from __future__ import annotations

from model_common.onnx_rows import OnnxRows


class TritonPythonModel(OnnxRows):
    graph_output = "activations"
    triton_output = "ACTIVATIONS"
