"""Triton Python model: token ids -> unit-length embedding and its norm, on
PyTorch (sentence_encoder.py beside this file): float16 on the instance's GPU,
float32 on CPU.

Same contract and request-level behaviour as the ONNX embedder
(model_repository/onnx_cpu/embedder): ragged requests share one execute call,
their rows are sorted by real length and run in groups of at most
rows_per_run, each cut to its own longest row; limits and bad tokens fail
only their own request. The weights are the HuggingFace checkpoint the ONNX
export was made from (model_dir in the ONNX embedder's export.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from sentence_encoder import embed_in_groups, load_encoder

# model.py is model_repository/torch_gpu/embedder/1/model.py (or a link to
# it); the export record sits in the ONNX embedder beside it.
EXPORT_RECORD = Path(__file__).resolve().parents[3] / "onnx_cpu" / "embedder" / "1" / "export.json"

Tokens = tuple[torch.Tensor, torch.Tensor]


def _invalid(message: str) -> pb_utils.TritonError:
    return pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        # One CPU thread per instance: the host work here (padding, sorting,
        # copies) is small, and instances that each started a thread per
        # core starved one another beside the tokenizer's on a GPU host
        # (perf/results/h100/, run1 against run2).
        torch.set_num_threads(1)
        parameters = json.loads(args["model_config"])["parameters"]
        export_info = json.loads(EXPORT_RECORD.read_text())
        self._max_length: int = export_info["max_seq_length"]
        self._rows_per_run = int(parameters["rows_per_run"]["string_value"])
        self._max_tokens = int(parameters["max_tokens_per_request"]["string_value"])
        if args["model_instance_kind"] == "GPU":
            device = torch.device("cuda", int(args["model_instance_device_id"]))
            dtype = torch.float16
        else:
            device, dtype = torch.device("cpu"), torch.float32
        self._encoder = load_encoder(
            Path(export_info["model_dir"]), export_info["pooling"], device, dtype
        )
        self._vocab_size = self._encoder.word_embeddings.num_embeddings

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        inputs = [self._read_tokens(request) for request in requests]
        valid = [item for item in inputs if not isinstance(item, pb_utils.TritonError)]
        outputs = iter(self._embed_requests(valid) if valid else [])
        return [
            pb_utils.InferenceResponse(error=item)
            if isinstance(item, pb_utils.TritonError)
            else next(outputs)
            for item in inputs
        ]

    def _read_tokens(self, request: pb_utils.InferenceRequest) -> Tokens | pb_utils.TritonError:
        input_ids = pb_utils.get_input_tensor_by_name(request, "INPUT_IDS").as_numpy()
        attention_mask = pb_utils.get_input_tensor_by_name(request, "ATTENTION_MASK").as_numpy()
        if input_ids.shape != attention_mask.shape:
            return _invalid(
                f"INPUT_IDS {list(input_ids.shape)} and ATTENTION_MASK "
                f"{list(attention_mask.shape)} must have the same shape"
            )
        rows, length = input_ids.shape
        if rows == 0 or length == 0:
            return _invalid("INPUT_IDS is empty: send at least one row of at least one token")
        if length > self._max_length:
            return _invalid(
                f"INPUT_IDS rows have {length} tokens; this model takes at most {self._max_length}"
            )
        tokens = int(np.count_nonzero(attention_mask))
        if tokens > self._max_tokens:
            return _invalid(
                f"the request has {tokens} tokens, over the limit of {self._max_tokens} "
                "(max_tokens_per_request); split it"
            )
        # Checked here, not left to the embedding lookup: on a GPU an index
        # out of range is a device-side assert that ends the whole process.
        if input_ids.min() < 0 or input_ids.max() >= self._vocab_size:
            return _invalid(
                "the model rejected the tokens: ids must lie in "
                f"[0, {self._vocab_size}), got [{input_ids.min()}, {input_ids.max()}]"
            )
        return torch.from_numpy(input_ids), torch.from_numpy(attention_mask)

    def _embed_requests(self, batch: list[Tokens]) -> list[pb_utils.InferenceResponse]:
        length = max(input_ids.shape[1] for input_ids, _ in batch)

        def stacked(index: int) -> torch.Tensor:
            padded = [
                torch.nn.functional.pad(tokens[index], (0, length - tokens[index].shape[1]))
                for tokens in batch
            ]
            return torch.cat(padded)

        embedding, norm = embed_in_groups(self._encoder, stacked(0), stacked(1), self._rows_per_run)
        sizes = [input_ids.shape[0] for input_ids, _ in batch]
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("EMBEDDING", rows.numpy()),
                    pb_utils.Tensor("NORM", row_norms.numpy()),
                ]
            )
            for rows, row_norms in zip(embedding.split(sizes), norm.split(sizes), strict=True)
        ]
