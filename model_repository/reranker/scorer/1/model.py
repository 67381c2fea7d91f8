"""Triton Python model: a pair's token ids -> the cross-encoder's relevance
score, running the exported ONNX graph (1/model.onnx) under ONNX Runtime.

Like the ONNX embedder: requests are checked where they enter (token ids
inside the vocabulary, token type ids inside the model's segments, the
request's tokens within max_tokens_per_request), the call's rows run in
length-sorted groups each padded to its own longest row
(model_common.rows), and a request whose values break the graph fails
alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from model_common.backlog import started_count
from model_common.embedder_setup import EmbedderSetup
from model_common.errors import ErrorKind, error_message
from model_common.rows import groups_by_tokens, real_lengths
from model_common.tokens import TokenLimits, token_error
from model_common.triton import invalid, respond_in_order
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

# What ONNX Runtime raises when a request's values break the graph.
_RUN_ERRORS = (Fail, InvalidArgument, RuntimeException)
# Triton's input names, by the graph's.
_TRITON_INPUTS = {
    "input_ids": "INPUT_IDS",
    "attention_mask": "ATTENTION_MASK",
    "token_type_ids": "TOKEN_TYPE_IDS",
}
Pairs = dict[str, np.ndarray]  # the graph's inputs, by name: [rows, length] each


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


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        setup = EmbedderSetup.from_args(args)
        fields = setup.record.fields
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
        options = ort.SessionOptions()
        options.intra_op_num_threads = setup.integer("intra_op_num_threads")
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(
            str(setup.version_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        self._started.add(len(requests))
        checked = [self._read(request) for request in requests]
        return respond_in_order(checked, self._score_requests)

    def _read(self, request: pb_utils.InferenceRequest) -> Pairs | pb_utils.TritonError:
        """The request's graph inputs, or the error that refuses it."""
        tensors = {
            name: pb_utils.get_input_tensor_by_name(request, triton).as_numpy()
            for name, triton in _TRITON_INPUTS.items()
        }
        error = token_error(tensors["input_ids"], tensors["attention_mask"], self._limits)
        if error is None and self._segments is not None:
            error = type_error(tensors["token_type_ids"], tensors["input_ids"], self._segments)
        if error:
            return invalid(error)
        return {name: tensors[name] for name in self._inputs}

    def _score_requests(self, batch: list[Pairs]) -> list[pb_utils.InferenceResponse]:
        """All requests' rows scored together; where a request's values break
        the graph, each request alone, so one never fails the others."""
        try:
            scores = self._score(_stack(batch))
        except _RUN_ERRORS:
            return [self._score_alone(pairs) for pairs in batch]
        splits = np.cumsum([pairs["input_ids"].shape[0] for pairs in batch])[:-1]
        return [_response(rows) for rows in np.split(scores, splits)]

    def _score_alone(self, pairs: Pairs) -> pb_utils.InferenceResponse:
        try:
            return _response(self._score(pairs))
        except _RUN_ERRORS as error:
            return pb_utils.InferenceResponse(
                error=invalid(
                    error_message(
                        ErrorKind.INVALID_INPUT, f"the model rejected the tokens: {error}"
                    )
                )
            )

    def _score(self, pairs: Pairs) -> np.ndarray:
        """[rows, 1] scores, in the rows' order, run in length-sorted groups."""
        lengths = real_lengths(pairs["attention_mask"])
        scores = np.empty((len(lengths), 1), np.float32)
        for group in groups_by_tokens(lengths, self._tokens_per_run, 1):
            length = int(lengths[group].max())
            feeds = {name: array[group, :length] for name, array in pairs.items()}
            scores[group] = self._session.run(["score"], feeds)[0]
        return scores


def _stack(batch: Sequence[Pairs]) -> Pairs:
    """Several requests' inputs as one, each row padded to the longest."""
    length = max(pairs["input_ids"].shape[1] for pairs in batch)
    return {
        name: np.concatenate(
            [np.pad(pairs[name], ((0, 0), (0, length - pairs[name].shape[1]))) for pairs in batch]
        )
        for name in batch[0]
    }


def _response(scores: np.ndarray) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SCORE", scores)])
