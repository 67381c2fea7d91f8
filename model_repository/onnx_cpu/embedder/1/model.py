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
from model_common.errors import ErrorKind, error_message
from model_common.record import ExportRecord
from model_common.tokens import TokenLimits, stack_tokens
from model_common.triton import (
    Tokens,
    embedding_response,
    invalid,
    read_tokens,
    respond_in_order,
)
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

# What ONNX Runtime raises when a request's values break the graph.
_RUN_ERRORS = (Fail, InvalidArgument, RuntimeException)

Embeddings = tuple[np.ndarray, np.ndarray]


def _real_lengths(attention_mask: np.ndarray) -> np.ndarray:
    """Position of each row's last attended token, plus one."""
    attended = attention_mask != 0
    last = attended.shape[1] - np.argmax(attended[:, ::-1], axis=1)
    return np.where(attended.any(axis=1), last, 1)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        parameters = json.loads(args["model_config"])["parameters"]
        version_dir = Path(args["model_repository"]) / args["model_version"]
        record = ExportRecord.read(version_dir)
        self._dims = record.embedding_dim
        self._limits = TokenLimits(
            max_length=record.max_seq_length,
            max_tokens=int(parameters["max_tokens_per_request"]["string_value"]),
            vocab_size=record.vocab_size,
        )
        self._rows_per_run = int(parameters["rows_per_run"]["string_value"])

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(parameters["intra_op_num_threads"]["string_value"])
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(
            str(version_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        checked = [read_tokens(request, self._limits, self._dims) for request in requests]
        return respond_in_order(checked, self._embed_requests)

    def _embed_requests(self, batch: list[Tokens]) -> list[pb_utils.InferenceResponse]:
        try:
            embedding, norm = self._embed_rows(*stack_tokens(batch))
        except _RUN_ERRORS:
            # Ids are checked on the way in; if the graph still fails, one
            # request's values must not fail the others merged with it.
            return [self._embed_alone(tokens) for tokens in batch]
        splits = np.cumsum([input_ids.shape[0] for input_ids, _ in batch])[:-1]
        return [
            embedding_response(rows, row_norms)
            for rows, row_norms in zip(
                np.split(embedding, splits), np.split(norm, splits), strict=True
            )
        ]

    def _embed_alone(self, tokens: Tokens) -> pb_utils.InferenceResponse:
        try:
            return embedding_response(*self._embed_rows(*tokens))
        except _RUN_ERRORS as error:
            return pb_utils.InferenceResponse(
                error=invalid(
                    error_message(
                        ErrorKind.INVALID_INPUT, f"the model rejected the tokens: {error}"
                    )
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
