"""Triton Python model: a multi-vector encoder's rows -> each position's
token vector (the backbone's, projected and normalized per token in the
graph), running the exported ONNX graph (1/model.onnx) under ONNX Runtime
(model_common.onnx_rows says how requests are checked and run).

Unlike a row-per-text stage, a row is not cut at its attention mask's end: a
query's expansion positions are unattended but scored, so each request's
rows run at the width its tokenizer gave them, requests of one width
together, and answer [rows, width, dimensions]. Then each row is pooled as
its POOL_FACTORS say (model_common.token_pooling: the model's own pooling,
then the request's): a pooled row's vectors come first, and SERVED_MASK,
which the serializer and the MaxSim scorer read, is 1 for as many; a row
without pooling keeps its positions, SERVED_MASK its VECTOR_MASK.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import triton_python_backend_utils as pb_utils
from model_common.embedder_setup import EmbedderSetup
from model_common.errors import ErrorKind, error_message
from model_common.onnx_rows import Checked, Feeds, OnnxRows, stack_feeds
from model_common.request_io import input_array, invalid, triton_tensor
from model_common.rows import groups_by_tokens
from model_common.tensors import (
    ATTENTION_MASK,
    INPUT_IDS,
    POOL_FACTORS,
    SERVED_MASK,
    TOKEN_VECTORS,
    VECTOR_MASK,
    StageIO,
)
from model_common.token_pooling import POOLING_STEPS, ModelPooling, pool_rows

_IDS = INPUT_IDS.graph_name


class TritonPythonModel(OnnxRows):
    io = StageIO(
        inputs=(INPUT_IDS, ATTENTION_MASK, VECTOR_MASK, POOL_FACTORS),
        outputs=(TOKEN_VECTORS, SERVED_MASK),
    )

    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        super()._set_up(args, setup)
        self._pooling = ModelPooling.from_record(setup.record.fields)

    def _decode(self, request: pb_utils.InferenceRequest) -> Checked | pb_utils.TritonError:
        checked = super()._decode(request)
        if isinstance(checked, pb_utils.TritonError):
            return checked
        rows, width = checked[1][_IDS].shape
        # Sent by this model's own tokenizers, so a wrong shape is an ensemble's mistake.
        for tensor, shape in ((VECTOR_MASK, (rows, width)), (POOL_FACTORS, (rows, POOLING_STEPS))):
            got = input_array(request, tensor).shape
            if got != shape:
                return invalid(
                    error_message(
                        ErrorKind.INVALID_INPUT,
                        f"{tensor.name} {list(got)} must be {list(shape)}, as INPUT_IDS are",
                    )
                )
        return checked

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

    def _respond(self, item: Checked, result: np.ndarray) -> pb_utils.InferenceResponse:
        request, _ = item
        vectors, served = pool_rows(
            result,
            input_array(request, VECTOR_MASK),
            input_array(request, POOL_FACTORS),
            self._pooling,
        )
        return pb_utils.InferenceResponse(
            output_tensors=[
                triton_tensor(TOKEN_VECTORS, vectors),
                triton_tensor(SERVED_MASK, served),
            ]
        )
