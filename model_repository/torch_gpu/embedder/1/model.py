"""Triton Python model: token ids -> unit-length embedding and its norm, on
PyTorch (sentence_encoder.py beside this file): float16 on the instance's GPU,
float32 on CPU.

Same contract and request-level behaviour as the ONNX embedder
(model_repository/onnx_cpu/embedder): ragged requests share one execute call,
their rows are sorted by real length and run in groups of at most
rows_per_run, each cut to its own longest row; limits and bad tokens fail
only their own request. The weights are the HuggingFace checkpoint the ONNX
export was made from (model_dir in 1/export.json, which export/export_onnx.py
writes here).
"""

from __future__ import annotations

from pathlib import Path

import torch
import triton_python_backend_utils as pb_utils
from model_common.embedder_setup import EmbedderSetup
from model_common.tokens import stack_tokens
from model_common.triton import Tokens, embedding_response, read_tokens, respond_in_order
from sentence_encoder import embed_in_groups, load_encoder


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        # One CPU thread per instance: the host work here (padding, sorting,
        # copies) is small, and instances that each started a thread per
        # core starved one another beside the tokenizer's on a GPU host
        # (perf/results/h100/report.md).
        torch.set_num_threads(1)
        setup = EmbedderSetup.from_args(args)
        record = setup.record
        self._dims = setup.dims
        self._limits = setup.limits
        self._rows_per_run = setup.integer("rows_per_run")
        if args["model_instance_kind"] == "GPU":
            device = torch.device("cuda", int(args["model_instance_device_id"]))
            dtype = torch.float16
        else:
            device, dtype = torch.device("cpu"), torch.float32
        self._encoder = load_encoder(
            Path(str(record.fields["model_dir"])), str(record.fields["pooling"]), device, dtype
        )

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        checked = [read_tokens(request, self._limits, self._dims) for request in requests]
        return respond_in_order(checked, self._embed_requests)

    def _embed_requests(self, batch: list[Tokens]) -> list[pb_utils.InferenceResponse]:
        input_ids, attention_mask = stack_tokens(batch)
        embedding, norm = embed_in_groups(
            self._encoder,
            torch.from_numpy(input_ids),
            torch.from_numpy(attention_mask),
            self._rows_per_run,
        )
        sizes = [rows.shape[0] for rows, _ in batch]
        return [
            embedding_response(rows.numpy(), row_norms.numpy())
            for rows, row_norms in zip(embedding.split(sizes), norm.split(sizes), strict=True)
        ]
