"""Triton Python model: token ids -> unit-length embedding and its norm,
running the exported graph as OpenVINO IR (1/model.xml, written by
export/export_openvino.py) on the CPU.

The request handling is the ONNX embedder's (model_common): the same checks,
errors and length-sorted rows. What differs is how they are grouped and run:
groups are capped in tokens, not rows, and OpenVINO streams, one thread
each, run the groups of one execute call at the same time, so a single
instance keeps every core busy however the dynamic batcher merged the
requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import openvino as ov
import triton_python_backend_utils as pb_utils
from model_common.openvino_compile import compile_served
from model_common.rows import Embeddings, Tokens, groups_by_tokens
from model_common.triton import GroupedEmbedder

# What OpenVINO raises when a request's values break the graph.
_RUN_ERRORS = (RuntimeError,)


class TritonPythonModel(GroupedEmbedder):
    def initialize(self, args: dict[str, str]) -> None:
        setup = self._set_up(args, _RUN_ERRORS)
        self._tokens_per_run = setup.integer("tokens_per_run")
        self._streams = setup.integer("streams")

        compiled, precision = compile_served(ov.Core(), setup, self._streams)
        self._outputs = (compiled.output("embedding"), compiled.output("norm"))
        self._queue = ov.AsyncInferQueue(compiled, self._streams)
        pb_utils.Logger.log_info(
            f"embedder: OpenVINO {ov.get_version()}, precision {precision}, "
            f"{self._streams} stream(s) of one thread"
        )

    def _cut_groups(self, lengths: np.ndarray) -> list[np.ndarray]:
        return groups_by_tokens(lengths, self._tokens_per_run, self._streams)

    def _run_groups(self, groups: Sequence[Tokens]) -> list[Embeddings]:
        results: list[Embeddings | None] = [None] * len(groups)
        errors: list[BaseException] = []
        embedding_output, norm_output = self._outputs

        def collect(request: ov.InferRequest, index: int) -> None:
            # Runs on an OpenVINO thread; the request's buffers are reused.
            try:
                results[index] = (
                    request.get_tensor(embedding_output).data.copy(),
                    request.get_tensor(norm_output).data.copy(),
                )
            except RuntimeError as error:
                errors.append(error)

        self._queue.set_callback(collect)
        try:
            for index, (input_ids, attention_mask) in enumerate(groups):
                self._queue.start_async(
                    {"input_ids": input_ids, "attention_mask": attention_mask}, userdata=index
                )
        finally:
            # Groups already started must finish before the next call reuses
            # the queue.
            self._queue.wait_all()
        if errors:
            raise errors[0]
        return [result for result in results if result is not None]
