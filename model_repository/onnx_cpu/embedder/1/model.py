"""Triton Python model: token ids -> unit-length embedding and its norm,
running the exported ONNX graph (1/model.onnx) under ONNX Runtime.

Each request arrives padded to its own longest row, and ragged batching lets
requests of different lengths share one execute call. Padding, not batch
size, dominates CPU cost, so all rows of the call are sorted by their real
length and run in small groups, each padded only to its own longest row.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

# What ONNX Runtime raises when a request's values break the graph.
_RUN_ERRORS = (Fail, InvalidArgument, RuntimeException)

Tokens = tuple[np.ndarray, np.ndarray]
Embeddings = tuple[np.ndarray, np.ndarray]


def _read_tokens(
    request: pb_utils.InferenceRequest, max_length: int, max_tokens: int
) -> Tokens | pb_utils.TritonError:
    input_ids = pb_utils.get_input_tensor_by_name(request, "INPUT_IDS").as_numpy()
    attention_mask = pb_utils.get_input_tensor_by_name(request, "ATTENTION_MASK").as_numpy()
    if input_ids.shape != attention_mask.shape:
        return pb_utils.TritonError(
            f"INPUT_IDS {list(input_ids.shape)} and ATTENTION_MASK "
            f"{list(attention_mask.shape)} must have the same shape",
            pb_utils.TritonError.INVALID_ARG,
        )
    rows, length = input_ids.shape
    if rows == 0 or length == 0:
        return pb_utils.TritonError(
            "INPUT_IDS is empty: send at least one row of at least one token",
            pb_utils.TritonError.INVALID_ARG,
        )
    if length > max_length:
        return pb_utils.TritonError(
            f"INPUT_IDS rows have {length} tokens; this model takes at most {max_length}",
            pb_utils.TritonError.INVALID_ARG,
        )
    tokens = int(np.count_nonzero(attention_mask))
    if tokens > max_tokens:
        return pb_utils.TritonError(
            f"the request has {tokens} tokens, over the limit of {max_tokens} "
            "(max_tokens_per_request); split it",
            pb_utils.TritonError.INVALID_ARG,
        )
    return input_ids, attention_mask


def _stack(batch: list[Tokens]) -> Tokens:
    length = max(input_ids.shape[1] for input_ids, _ in batch)

    def pad(array: np.ndarray) -> np.ndarray:
        return np.pad(array, ((0, 0), (0, length - array.shape[1])))

    return (
        np.concatenate([pad(input_ids) for input_ids, _ in batch]),
        np.concatenate([pad(attention_mask) for _, attention_mask in batch]),
    )


def _real_lengths(attention_mask: np.ndarray) -> np.ndarray:
    """Position of each row's last attended token, plus one."""
    attended = attention_mask != 0
    last = attended.shape[1] - np.argmax(attended[:, ::-1], axis=1)
    return np.where(attended.any(axis=1), last, 1)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        parameters = config["parameters"]
        version_dir = Path(args["model_repository"]) / args["model_version"]
        export_info = json.loads((version_dir / "export.json").read_text())
        self._max_length: int = export_info["max_seq_length"]
        self._rows_per_run = int(parameters["rows_per_run"]["string_value"])
        self._max_tokens = int(parameters["max_tokens_per_request"]["string_value"])

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(parameters["intra_op_num_threads"]["string_value"])
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(
            str(version_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self._dims: int = export_info["embedding_dim"]

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        inputs = [_read_tokens(request, self._max_length, self._max_tokens) for request in requests]
        valid = [item for item in inputs if not isinstance(item, pb_utils.TritonError)]
        outputs = iter(self._embed_requests(valid) if valid else [])
        return [
            pb_utils.InferenceResponse(error=item)
            if isinstance(item, pb_utils.TritonError)
            else next(outputs)
            for item in inputs
        ]

    def _embed_requests(self, batch: list[Tokens]) -> list[pb_utils.InferenceResponse]:
        try:
            embedding, norm = self._embed_rows(*_stack(batch))
        except _RUN_ERRORS:
            # One bad request (say, an id outside the vocabulary) must not
            # fail the others merged with it: run each on its own.
            return [self._embed_alone(tokens) for tokens in batch]
        splits = np.cumsum([input_ids.shape[0] for input_ids, _ in batch])[:-1]
        return [
            self._response(rows, row_norms)
            for rows, row_norms in zip(
                np.split(embedding, splits), np.split(norm, splits), strict=True
            )
        ]

    def _embed_alone(self, tokens: Tokens) -> pb_utils.InferenceResponse:
        try:
            return self._response(*self._embed_rows(*tokens))
        except _RUN_ERRORS as error:
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError(
                    f"the model rejected the tokens: {error}", pb_utils.TritonError.INVALID_ARG
                )
            )

    def _embed_rows(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> Embeddings:
        lengths = _real_lengths(attention_mask)
        order = np.argsort(lengths, kind="stable")
        embedding = np.empty((len(order), self._dims), np.float32)
        norm = np.empty((len(order), 1), np.float32)
        for start in range(0, len(order), self._rows_per_run):
            group = order[start : start + self._rows_per_run]
            length = int(lengths[group].max())
            group_embedding, group_norm = self._session.run(
                ["embedding", "norm"],
                {
                    "input_ids": input_ids[group, :length],
                    "attention_mask": attention_mask[group, :length],
                },
            )
            embedding[group] = group_embedding
            norm[group] = group_norm
        return embedding, norm

    @staticmethod
    def _response(embedding: np.ndarray, norm: np.ndarray) -> pb_utils.InferenceResponse:
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("EMBEDDING", embedding), pb_utils.Tensor("NORM", norm)]
        )
