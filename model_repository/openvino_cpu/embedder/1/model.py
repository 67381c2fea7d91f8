"""Triton Python model: token ids -> unit-length embedding and its norm,
running the exported graph as OpenVINO IR (1/model.xml, written by
export/export_openvino.py) on the CPU.

The request handling is the ONNX embedder's (model_common): the same checks,
errors and length-sorted groups. What differs is how groups run: OpenVINO
streams, one thread each, run the groups of one execute call at the same
time, so a single instance keeps every core busy however the dynamic batcher
merged the requests.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import openvino as ov
import triton_python_backend_utils as pb_utils
from model_common.record import ExportRecord
from model_common.rows import Embeddings, Tokens, embed_in_groups
from model_common.tokens import TokenLimits
from model_common.triton import embed_execute

# What OpenVINO raises when a request's values break the graph.
_RUN_ERRORS = (RuntimeError,)
PRECISIONS = ("auto", "bf16", "f32")


def cache_dir() -> Path:
    """Where OpenVINO keeps compiled models, so a restart loads instead of
    compiling again."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "triton-embedding" / "openvino"


def served_precision(wanted: str, exported: str, capabilities: Sequence[str]) -> str:
    """The inference precision to compile for. `auto` takes what the export
    checked against sentence-transformers (bf16 only if it kept the cosine
    bar), on a processor that runs bfloat16."""
    if wanted not in PRECISIONS:
        raise ValueError(f"parameter 'precision' is {wanted!r}; expected one of {PRECISIONS}")
    if wanted == "bf16" and "BF16" not in capabilities:
        raise ValueError("parameter 'precision' is 'bf16', but this processor has no bfloat16")
    if wanted == "auto":
        return "bf16" if exported == "bf16" and "BF16" in capabilities else "f32"
    return wanted


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        parameters = {
            key: value["string_value"]
            for key, value in json.loads(args["model_config"])["parameters"].items()
        }
        version_dir = Path(args["model_repository"]) / args["model_version"]
        record = ExportRecord.read(version_dir)
        self._dims = record.embedding_dim
        self._limits = TokenLimits(
            max_length=record.max_seq_length,
            max_tokens=int(parameters["max_tokens_per_request"]),
            vocab_size=record.vocab_size,
        )
        self._rows_per_run = int(parameters["rows_per_run"])
        self._streams = int(parameters["streams"])

        core = ov.Core()
        exported = str(dict(record.fields.get("openvino") or {}).get("precision", "f32"))
        precision = served_precision(
            parameters["precision"], exported, core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        )
        cache = cache_dir()
        try:
            cache.mkdir(parents=True, exist_ok=True)
            core.set_property({"CACHE_DIR": str(cache)})
        except OSError as error:
            pb_utils.Logger.log_warn(f"embedder: no OpenVINO model cache ({error}); compiling")
        compiled = core.compile_model(
            str(version_dir / "model.xml"),
            "CPU",
            {
                "INFERENCE_PRECISION_HINT": precision,
                "NUM_STREAMS": self._streams,
                "INFERENCE_NUM_THREADS": self._streams,
            },
        )
        self._outputs = (compiled.output("embedding"), compiled.output("norm"))
        self._queue = ov.AsyncInferQueue(compiled, self._streams)
        pb_utils.Logger.log_info(
            f"embedder: OpenVINO {ov.get_version()}, precision {precision}, "
            f"{self._streams} stream(s) of one thread"
        )

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        return embed_execute(requests, self._limits, self._dims, self._embed_rows, _RUN_ERRORS)

    def _embed_rows(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> Embeddings:
        return embed_in_groups(
            input_ids,
            attention_mask,
            self._dims,
            self._rows_per_run,
            self._streams,
            self._run_groups,
        )

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
