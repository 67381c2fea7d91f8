"""Triton Python model: a multi-vector encoder's rows -> each position's
token vector (the backbone's, projected and normalized per token in the
graph), running the exported ONNX graph (1/model.onnx) under ONNX Runtime
(model_common.onnx_rows says how requests are checked and run).

Unlike a row-per-text stage, a row is not cut at its attention mask's end: a
query's expansion positions are unattended but scored, so each request's
rows run at the width its tokenizer gave them, requests of one width
together, and answer [rows, width, dimensions]; the serializer and the MaxSim
scorer keep the positions their VECTOR_MASK names.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from model_common.onnx_rows import Feeds, OnnxRows, stack_feeds
from model_common.rows import groups_by_tokens
from model_common.tensors import ATTENTION_MASK, INPUT_IDS, TOKEN_VECTORS, StageIO

_IDS = INPUT_IDS.graph_name


class TritonPythonModel(OnnxRows):
    io = StageIO(inputs=(INPUT_IDS, ATTENTION_MASK), outputs=(TOKEN_VECTORS,))

    def _run_requests(self, batch: Sequence[Feeds]) -> list[np.ndarray]:
        widths = np.concatenate(
            [np.full(len(feeds[_IDS]), feeds[_IDS].shape[1]) for feeds in batch]
        )
        stacked = stack_feeds(batch)
        outputs = []
        groups = groups_by_tokens(widths, self._tokens_per_run, 1)
        for group in groups:
            width = int(widths[group].max())
            outputs.append(
                self._run_graph({name: rows[group, :width] for name, rows in stacked.items()})
            )
        vectors = np.zeros((len(widths), int(widths.max()), outputs[0].shape[2]), np.float32)
        for group, output in zip(groups, outputs, strict=True):
            vectors[group, : output.shape[1]] = output
        starts = np.cumsum([0, *(len(feeds[_IDS]) for feeds in batch)])
        return [
            vectors[start:end, : feeds[_IDS].shape[1]]
            for start, end, feeds in zip(starts[:-1], starts[1:], batch, strict=True)
        ]
