"""The execute of a Python stage that runs an exported ONNX graph with one
output row per input row: a reranker's scorer (a score per pair) and a sparse
encoder (a vocabulary-wide vector per text). The config's `engine` parameter
says what runs it: ONNX Runtime on model.onnx, or OpenVINO on the IR
export/export_openvino.py wrote beside it (model.xml), in the precision its
`precision` parameter asks for (auto: the one the export checked), one
thread each, as ONNX Runtime runs it.

Like the ONNX embedder: requests are checked where they enter (token ids
inside the vocabulary, token type ids inside the model's segments, the
request's tokens within max_tokens_per_request), the call's rows run in
length-sorted groups each padded to its own longest row (model_common.rows),
and a request whose values break the graph fails alone. The graph's inputs
are the export record's `inputs`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnxruntime as ort
import openvino as ov
import triton_python_backend_utils as pb_utils
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

from model_common.backlog import started_count
from model_common.embedder_setup import EmbedderSetup
from model_common.errors import ErrorKind, error_message
from model_common.openvino_compile import compile_served
from model_common.rows import groups_by_tokens, real_lengths
from model_common.tokens import TokenLimits, token_error
from model_common.triton import invalid, respond_in_order

# What each engine raises when a request's values break the graph.
_RUN_ERRORS = {
    "onnxruntime": (Fail, InvalidArgument, RuntimeException),
    "openvino": (RuntimeError,),
}
# Triton's input names, by the graph's.
_TRITON_INPUTS = {
    "input_ids": "INPUT_IDS",
    "attention_mask": "ATTENTION_MASK",
    "token_type_ids": "TOKEN_TYPE_IDS",
}
Feeds = dict[str, np.ndarray]  # the graph's inputs, by name: [rows, length] each
# A graph's run: its inputs -> the output rows, [rows, width] float32.
RunGraph = Callable[[Feeds], np.ndarray]
# A request with its graph inputs, checked.
# (A string: triton_python_backend_utils has no InferenceRequest when a stage is imported.)
Checked = tuple["pb_utils.InferenceRequest", Feeds]


def type_error(token_type_ids: np.ndarray, input_ids: np.ndarray, segments: int) -> str | None:
    """The error message for token type ids the model must not see, or None."""
    if token_type_ids.shape != input_ids.shape:
        return error_message(
            ErrorKind.INVALID_INPUT,
            f"TOKEN_TYPE_IDS {list(token_type_ids.shape)} and INPUT_IDS "
            f"{list(input_ids.shape)} must have the same shape",
        )
    low, high = int(token_type_ids.min()), int(token_type_ids.max())
    if low < 0 or high >= segments:
        return error_message(
            ErrorKind.INVALID_INPUT,
            f"token type ids must lie in [0, {segments}), got [{low}, {high}]",
        )
    return None


class OnnxRows:
    """A stage answering `triton_output` from the graph's `graph_output`,
    [rows, width] float32; a model sets both and subclasses it."""

    graph_output: str
    triton_output: str

    def initialize(self, args: dict[str, str]) -> None:
        setup = EmbedderSetup.from_args(args)
        fields = setup.record.fields
        self._fields = fields
        inputs = fields.get("inputs")
        if not isinstance(inputs, list):
            raise ValueError("the export record names no graph inputs; export the model again")
        self._inputs = [str(name) for name in inputs]
        unknown = sorted(set(self._inputs) - _TRITON_INPUTS.keys())
        if unknown:
            raise ValueError(f"the graph takes inputs {unknown} that no stage sends")
        segments = fields.get("type_vocab_size")
        self._segments = int(str(segments)) if "token_type_ids" in self._inputs else None
        self._limits: TokenLimits = setup.limits
        self._tokens_per_run = setup.integer("tokens_per_run")
        self._started = started_count(args)
        engine = setup.parameters["engine"]
        if engine not in _RUN_ERRORS:
            raise ValueError(
                f"parameter 'engine' is {engine!r}; expected one of {list(_RUN_ERRORS)}"
            )
        self._run_errors = _RUN_ERRORS[engine]
        opened = _open_openvino if engine == "openvino" else _open_onnxruntime
        self._run_graph = opened(setup, self.graph_output)

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        self._started.add(len(requests))
        checked = [self._read(request) for request in requests]
        return respond_in_order(checked, self._run_requests)

    def _read(self, request: pb_utils.InferenceRequest) -> Checked | pb_utils.TritonError:
        """The request's graph inputs, or the error that refuses it."""
        feeds = {
            name: pb_utils.get_input_tensor_by_name(request, _TRITON_INPUTS[name]).as_numpy()
            for name in self._inputs
        }
        error = token_error(feeds["input_ids"], feeds["attention_mask"], self._limits)
        if error is None and self._segments is not None:
            error = type_error(feeds["token_type_ids"], feeds["input_ids"], self._segments)
        return invalid(error) if error else (request, feeds)

    def _run_requests(self, batch: list[Checked]) -> list[pb_utils.InferenceResponse]:
        """All requests' rows run together; where a request's values break
        the graph, each request alone, so one never fails the others."""
        try:
            rows = self._run(_stack([feeds for _, feeds in batch]))
        except self._run_errors:
            return [self._run_alone(checked) for checked in batch]
        splits = np.cumsum([feeds["input_ids"].shape[0] for _, feeds in batch])[:-1]
        return [
            self._response(self._finish(part, request))
            for part, (request, _) in zip(np.split(rows, splits), batch, strict=True)
        ]

    def _run_alone(self, checked: Checked) -> pb_utils.InferenceResponse:
        request, feeds = checked
        try:
            return self._response(self._finish(self._run(feeds), request))
        except self._run_errors as error:
            return pb_utils.InferenceResponse(
                error=invalid(
                    error_message(
                        ErrorKind.INVALID_INPUT, f"the model rejected the tokens: {error}"
                    )
                )
            )

    def _run(self, feeds: Feeds) -> np.ndarray:
        """[rows, width], in the rows' order, run in length-sorted groups."""
        lengths = real_lengths(feeds["attention_mask"])
        groups = groups_by_tokens(lengths, self._tokens_per_run, 1)
        outputs = []
        for group in groups:
            length = int(lengths[group].max())
            trimmed = {name: array[group, :length] for name, array in feeds.items()}
            outputs.append(self._run_graph(trimmed))
        rows = np.empty((len(lengths), outputs[0].shape[1]), np.float32)
        for group, output in zip(groups, outputs, strict=True):
            rows[group] = output
        return rows

    def _finish(self, rows: np.ndarray, request: pb_utils.InferenceRequest) -> np.ndarray:
        """A request's rows as answered; a model may apply what its record
        and the request's parameters ask for."""
        return rows

    def _response(self, rows: np.ndarray) -> pb_utils.InferenceResponse:
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor(self.triton_output, rows)]
        )


def _open_onnxruntime(setup: EmbedderSetup, output: str) -> RunGraph:
    options = ort.SessionOptions()
    options.intra_op_num_threads = setup.integer("intra_op_num_threads")
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(
        str(setup.version_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    return lambda feeds: session.run([output], feeds)[0]


def _open_openvino(setup: EmbedderSetup, output: str) -> RunGraph:
    compiled, precision = compile_served(ov.Core(), setup, setup.integer("intra_op_num_threads"))
    request = compiled.create_infer_request()
    port = compiled.output(output)
    pb_utils.Logger.log_info(f"OpenVINO {ov.get_version()}, precision {precision}")
    # The request's output buffer is reused by its next run.
    return lambda feeds: request.infer(feeds)[port].copy()


def _stack(batch: Sequence[Feeds]) -> Feeds:
    """Several requests' inputs as one, each row padded to the longest."""
    length = max(feeds["input_ids"].shape[1] for feeds in batch)
    return {
        name: np.concatenate(
            [np.pad(feeds[name], ((0, 0), (0, length - feeds[name].shape[1]))) for feeds in batch]
        )
        for name in batch[0]
    }
