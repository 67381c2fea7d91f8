"""The execute of a Python stage that runs an exported ONNX graph
(GraphStage), and of one with one output row per input row (OnnxRows): a
reranker's scorer (a score per pair) and a sparse encoder (a vocabulary-wide
vector per text). The config's `engine` parameter
says what runs it: ONNX Runtime on model.onnx, or OpenVINO on the IR
export/export_openvino.py wrote beside it (model.xml), in the precision its
`precision` parameter asks for (auto: the one the export checked on this
processor class), with ONNX Runtime's threads (more only where the export
found the engine needs them: model_common.openvino_setting).

Like the ONNX embedder: requests are checked where they enter (token ids
inside the vocabulary, token type ids inside the model's segments, the
request's tokens within max_tokens_per_request), the call's rows run in
length-sorted groups each padded to its own longest row (model_common.rows),
and a request whose values break the graph fails alone
(model_common.merged_runs). The graph's inputs are the export record's
`inputs`, each one the stage's input of that graph name; at load the graph
itself must take exactly those and give the stage's output
(model_common.stage_io).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

from model_common.door import WorkCounter
from model_common.embedder_setup import EmbedderSetup
from model_common.errors import ErrorKind, error_message
from model_common.graph_tensors import onnxruntime_tensors, openvino_tensors
from model_common.merged_runs import request_splits, run_merged
from model_common.openvino_compile import compile_served
from model_common.openvino_runtime import ov
from model_common.request_io import input_array, invalid, triton_tensor
from model_common.rows import groups_by_tokens, real_lengths
from model_common.stage import Result, Stage
from model_common.stage_io import GraphTensors
from model_common.tensors import ATTENTION_MASK, INPUT_IDS, TOKEN_TYPE_IDS, Tensor
from model_common.tokens import TokenLimits, token_error

# What each engine raises when a request's values break the graph.
_RUN_ERRORS = {
    "onnxruntime": (Fail, InvalidArgument, RuntimeException),
    "openvino": (RuntimeError,),
}
Feeds = dict[str, np.ndarray]  # the graph's inputs, by name: [rows, length] each
_IDS, _MASK, _TYPES = (tensor.graph_name for tensor in (INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS))
# A graph's run: its inputs -> the outputs the stage reads, in its io's order, float32 each.
RunGraph = Callable[[Feeds], list[np.ndarray]]
# Refuses the load where the graph opened (its file's name, its tensors) is not the stage's.
GraphCheck = Callable[[str, GraphTensors], None]
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


class GraphStage(Stage[Checked, Result]):
    """A stage running an exported graph on its requests' graph inputs: the
    graph opened on the `engine` parameter's engine and checked against the
    stage's `io` (its inputs the record names, its outputs of a graph name),
    requests checked where they enter and run together. A model says how a
    batch's requests run (`_run_requests`) and what each answers."""

    admission = WorkCounter

    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        fields = setup.record.fields
        self._fields = fields
        self._feeds = self._fed_inputs(fields.get("inputs"))
        segments = fields.get("type_vocab_size")
        self._segments = int(str(segments)) if _TYPES in self._feeds else None
        self._limits: TokenLimits = setup.limits
        self._tokens_per_run = setup.integer("tokens_per_run")
        engine = setup.text("engine")
        if engine not in _RUN_ERRORS:
            raise ValueError(
                f"parameter 'engine' is {engine!r}; expected one of {list(_RUN_ERRORS)}"
            )
        self._run_errors = _RUN_ERRORS[engine]
        self._output = self.io.outputs[0]
        self._graph_outputs = [tensor for tensor in self.io.outputs if tensor.graph is not None]
        opened = _open_openvino if engine == "openvino" else _open_onnxruntime
        names = [tensor.graph_name for tensor in self._graph_outputs]
        self._run_outputs = opened(setup, names, self._graph_check)

    def _run_graph(self, feeds: Feeds) -> np.ndarray:
        """The graph's first output the stage writes, for a stage writing one."""
        return self._run_outputs(feeds)[0]

    def _graph_check(self, graph_file: str, graph: GraphTensors) -> None:
        self._check_graph(graph_file, graph, list(self._feeds.values()), self._graph_outputs)

    def _fed_inputs(self, record_inputs: object) -> dict[str, Tensor]:
        """The stage's input for each graph input the export record names."""
        if not isinstance(record_inputs, list):
            raise ValueError("the export record names no graph inputs; export the model again")
        by_graph = {tensor.graph: tensor for tensor in self.io.inputs if tensor.graph is not None}
        names = [str(name) for name in record_inputs]
        unknown = sorted(set(names) - by_graph.keys())
        if unknown:
            raise ValueError(
                f"the graph takes inputs {unknown} that this stage is not sent "
                f"(it is sent {list(by_graph)})"
            )
        return {name: by_graph[name] for name in names}

    def _decode(self, request: pb_utils.InferenceRequest) -> Checked | pb_utils.TritonError:
        """The request's graph inputs, or the error that refuses it."""
        feeds = {name: input_array(request, tensor) for name, tensor in self._feeds.items()}
        error = token_error(feeds[_IDS], feeds[_MASK], self._limits)
        if error is None and self._segments is not None:
            error = type_error(feeds[_TYPES], feeds[_IDS], self._segments)
        return invalid(error) if error else (request, feeds)

    def _tokens(self, batch: list[Checked]) -> int:
        return sum(int(feeds[_MASK].sum()) for _, feeds in batch)

    def _run(self, batch: list[Checked]) -> list[Result | pb_utils.TritonError]:
        """All requests' rows run together; where a request's values break
        the graph, each request alone, so one never fails the others."""
        return run_merged([feeds for _, feeds in batch], self._run_requests, self._run_errors)

    @abstractmethod
    def _run_requests(self, batch: Sequence[Feeds]) -> list[Result]:
        """Each request's result, the batch's requests run together."""

    def _run_grouped(self, feeds: Feeds) -> list[np.ndarray]:
        """Each graph output the stage reads, for all rows in their order, run in
        length-sorted groups each cut to its longest row (model_common.rows); an output with
        a length axis is zero past a group's length, up to the longest row's."""
        lengths = real_lengths(feeds[_MASK])
        groups = groups_by_tokens(lengths, self._tokens_per_run, 1)
        runs = []
        for group in groups:
            length = int(lengths[group].max())
            runs.append(
                self._run_outputs({name: rows[group, :length] for name, rows in feeds.items()})
            )
        merged = []
        for parts in zip(*runs, strict=True):
            shape = np.max([part.shape[1:] for part in parts], axis=0)
            into = np.zeros((len(lengths), *shape), np.float32)
            for group, part in zip(groups, parts, strict=True):
                into[(group, *(slice(0, size) for size in part.shape[1:]))] = part
            merged.append(into)
        return merged


class OnnxRows(GraphStage[np.ndarray]):
    """A stage answering its graph output (its `io`'s first output) from the
    graph's output of that graph name, [rows, width] float32; a model sets
    its `io` and subclasses it. Inputs and outputs of no graph name are the
    model's own to read and write (a multi-vector encoder's pooling)."""

    def _run_requests(self, batch: Sequence[Feeds]) -> list[np.ndarray]:
        rows = self._run_rows(stack_feeds(batch))
        return np.split(rows, request_splits([feeds[_IDS].shape[0] for feeds in batch]))

    def _run_rows(self, feeds: Feeds) -> np.ndarray:
        """[rows, width], in the rows' order."""
        return self._run_grouped(feeds)[0]

    def _respond(self, item: Checked, result: np.ndarray) -> pb_utils.InferenceResponse:
        request, _ = item
        return pb_utils.InferenceResponse(
            output_tensors=[triton_tensor(self._output, self._finish(result, request))]
        )

    def _finish(self, rows: np.ndarray, request: pb_utils.InferenceRequest) -> np.ndarray:
        """A request's rows as answered; a model may apply what its record
        and the request's parameters ask for."""
        return rows


def _open_onnxruntime(setup: EmbedderSetup, output_names: list[str], check: GraphCheck) -> RunGraph:
    options = ort.SessionOptions()
    options.intra_op_num_threads = setup.integer("intra_op_num_threads")
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(
        str(setup.version_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    check("model.onnx", onnxruntime_tensors(session))
    return lambda feeds: session.run(output_names, feeds)


def _open_openvino(setup: EmbedderSetup, output_names: list[str], check: GraphCheck) -> RunGraph:
    served = compile_served(
        ov.Core(), setup, setup.integer("intra_op_num_threads"), pb_utils.Logger.log_warn
    )
    check("model.xml", openvino_tensors(served.compiled))
    request = served.compiled.create_infer_request()
    ports = [served.compiled.output(name) for name in output_names]
    pb_utils.Logger.log_info(f"OpenVINO {ov.get_version()}, precision {served.setting.label}")

    def run(feeds: Feeds) -> list[np.ndarray]:
        results = request.infer(feeds)
        # The request's output buffers are reused by its next run.
        return [results[port].copy() for port in ports]

    return run


def stack_feeds(batch: Sequence[Feeds]) -> Feeds:
    """Several requests' inputs as one, each row padded to the longest."""
    length = max(feeds[_IDS].shape[1] for feeds in batch)
    return {
        name: np.concatenate(
            [np.pad(feeds[name], ((0, 0), (0, length - feeds[name].shape[1]))) for feeds in batch]
        )
        for name in batch[0]
    }
