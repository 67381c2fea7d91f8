"""Triton Python model: token ids -> unit-length embedding and its norm,
running the exported ONNX graph (1/model.onnx) under ONNX Runtime.

Requests arrive padded to their own longest row (ragged batching). Requests
whose lengths fall in the same power-of-two bucket are padded to a common
length and run as one batch, so batches stay large while padding stays under
2x of the real tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

_MIN_BUCKET = 16
# What ONNX Runtime raises when a request's values break the graph.
_RUN_ERRORS = (Fail, InvalidArgument, RuntimeException)

Tokens = tuple[np.ndarray, np.ndarray]


def _bucket(length: int) -> int:
    return max(_MIN_BUCKET, 1 << (length - 1).bit_length())


def _pad_to(array: np.ndarray, length: int) -> np.ndarray:
    return np.pad(array, ((0, 0), (0, length - array.shape[1])))


def _read_tokens(
    request: pb_utils.InferenceRequest, max_length: int
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
    return input_ids, attention_mask


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        version_dir = Path(args["model_repository"]) / args["model_version"]
        export_info = json.loads((version_dir / "export.json").read_text())
        self._max_length: int = export_info["max_seq_length"]

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(
            config["parameters"]["intra_op_num_threads"]["string_value"]
        )
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(
            str(version_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        inputs = [_read_tokens(request, self._max_length) for request in requests]
        buckets: dict[int, list[int]] = {}
        for index, item in enumerate(inputs):
            if not isinstance(item, pb_utils.TritonError):
                buckets.setdefault(_bucket(item[0].shape[1]), []).append(index)

        results: dict[int, pb_utils.InferenceResponse] = {}
        for members in buckets.values():
            results.update(self._run_bucket({index: inputs[index] for index in members}))
        return [
            pb_utils.InferenceResponse(error=item)
            if isinstance(item, pb_utils.TritonError)
            else results[index]
            for index, item in enumerate(inputs)
        ]

    def _run_bucket(self, members: dict[int, Tokens]) -> dict[int, pb_utils.InferenceResponse]:
        try:
            outputs = self._infer(list(members.values()))
        except _RUN_ERRORS as error:
            if len(members) == 1:
                failure = pb_utils.TritonError(
                    f"the model rejected the tokens: {error}", pb_utils.TritonError.INVALID_ARG
                )
                return {index: pb_utils.InferenceResponse(error=failure) for index in members}
            # One bad request (say, an id outside the vocabulary) must not
            # fail the others merged with it: retry each on its own.
            results: dict[int, pb_utils.InferenceResponse] = {}
            for index, tokens in members.items():
                results.update(self._run_bucket({index: tokens}))
            return results
        return {
            index: pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("EMBEDDING", embedding),
                    pb_utils.Tensor("NORM", norm),
                ]
            )
            for index, (embedding, norm) in zip(members, outputs, strict=True)
        }

    def _infer(self, batch: list[Tokens]) -> list[tuple[np.ndarray, np.ndarray]]:
        length = max(input_ids.shape[1] for input_ids, _ in batch)
        input_ids = np.concatenate([_pad_to(ids, length) for ids, _ in batch])
        attention_mask = np.concatenate([_pad_to(mask, length) for _, mask in batch])
        embedding, norm = self._session.run(
            ["embedding", "norm"], {"input_ids": input_ids, "attention_mask": attention_mask}
        )
        splits = np.cumsum([ids.shape[0] for ids, _ in batch])[:-1]
        return list(zip(np.split(embedding, splits), np.split(norm, splits), strict=True))
