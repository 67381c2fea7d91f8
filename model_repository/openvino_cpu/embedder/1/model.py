"""Triton Python model: token ids -> unit-length embedding and its norm,
running the exported graph as OpenVINO IR (1/model.xml, written by
export/export_openvino.py) on the CPU.

The request handling is the ONNX embedder's (model_common): the same checks,
errors and length-sorted rows. What differs is how they are grouped and run:
groups are capped in tokens, not rows, and OpenVINO streams (one thread
each, unless the export found the engine needs more:
model_common.openvino_setting) run the groups of one execute call at the
same time, so a single instance keeps every core busy however the dynamic
batcher merged the requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import triton_python_backend_utils as pb_utils
from model_common.embedder import GroupedEmbedder
from model_common.embedder_setup import EmbedderSetup
from model_common.graph_tensors import openvino_tensors
from model_common.openvino_compile import compile_served
from model_common.openvino_runtime import ov
from model_common.rows import Embeddings, Tokens, groups_by_tokens
from model_common.tensors import EMBEDDER_IO

_FEEDS = [tensor.graph_name for tensor in EMBEDDER_IO.inputs]


class TritonPythonModel(GroupedEmbedder):
    run_errors = (RuntimeError,)

    def _open(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        self._tokens_per_run = setup.integer("tokens_per_run")
        threads = setup.integer("threads")
        served = compile_served(ov.Core(), setup, threads, pb_utils.Logger.log_warn)
        compiled = served.compiled
        self._check_graph(
            "model.xml", openvino_tensors(compiled), EMBEDDER_IO.inputs, EMBEDDER_IO.outputs
        )
        self._streams = served.streams
        self._outputs = [compiled.output(tensor.graph_name) for tensor in EMBEDDER_IO.outputs]
        self._queue = ov.AsyncInferQueue(compiled, self._streams)
        pb_utils.Logger.log_info(
            f"embedder: OpenVINO {ov.get_version()}, precision {served.setting.precision}, "
            f"{self._streams} stream(s) of {served.setting.threads_per_stream} thread(s)"
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
            for index, group in enumerate(groups):
                self._queue.start_async(dict(zip(_FEEDS, group, strict=True)), userdata=index)
        finally:
            # Groups already started must finish before the next call reuses
            # the queue.
            self._queue.wait_all()
        if errors:
            raise errors[0]
        return [result for result in results if result is not None]
