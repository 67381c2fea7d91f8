"""Triton Python model: the checks in front of the TensorRT engine.

Each request is checked as every embedder checks it (model_common: output
options, row length, tokens per request, ids inside the vocabulary); a bad
one gets its error, and each good one goes unchanged, on its own, to the
engine model `embedder_engine` through BLS, all of one execute call's
requests at once. The engine's answer (or its error) is the request's.

The limits are the engine's own: <this repository>/embedder_engine/1/
engine.json, written by export/export_tensorrt.py from the ONNX export's
record, so the repository deploys on its own.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import triton_python_backend_utils as pb_utils
from model_common.backlog import started_count
from model_common.tokens import TokenLimits
from model_common.triton import Tokens, read_tokens

ENGINE = "embedder_engine"
OUTPUTS = ["EMBEDDING", "NORM"]
RECORD_KEYS = ("embedding_dim", "max_seq_length", "vocab_size")


def read_engine_record(path: Path) -> dict[str, int]:
    """The fields of engine.json this model checks requests against."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; build it with export/export_tensorrt.py")
    fields = json.loads(path.read_text())
    missing = sorted(set(RECORD_KEYS) - fields.keys())
    if missing:
        raise ValueError(f"{path} lacks {missing}; build it again with export/export_tensorrt.py")
    return {key: int(fields[key]) for key in RECORD_KEYS}


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        parameters = json.loads(args["model_config"])["parameters"]
        repository = Path(args["model_repository"]).parent
        self._started = started_count(args)
        record = read_engine_record(repository / ENGINE / "1" / "engine.json")
        self._dims = record["embedding_dim"]
        self._limits = TokenLimits(
            max_length=record["max_seq_length"],
            max_tokens=int(parameters["max_tokens_per_request"]["string_value"]),
            vocab_size=record["vocab_size"],
        )
        # The engine runs on the GPU; its outputs come back in CPU memory,
        # copied there by Triton: the next stage (the serializer) reads them
        # on the host anyway, and so they pass on as they are.
        self._output_memory = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)

    async def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        self._started.add(len(requests))
        checked = [read_tokens(request, self._limits, self._dims) for request in requests]
        return list(await asyncio.gather(*(self._respond(item) for item in checked)))

    async def _respond(self, item: Tokens | pb_utils.TritonError) -> pb_utils.InferenceResponse:
        if isinstance(item, pb_utils.TritonError):
            return pb_utils.InferenceResponse(error=item)
        input_ids, attention_mask = item
        engine_request = pb_utils.InferenceRequest(
            model_name=ENGINE,
            inputs=[
                pb_utils.Tensor("INPUT_IDS", input_ids),
                pb_utils.Tensor("ATTENTION_MASK", attention_mask),
            ],
            requested_output_names=OUTPUTS,
            preferred_memory=self._output_memory,
        )
        # A failed BLS call comes back as a response with an error, never as
        # an exception, so it fails only this request. Triton 2.51's BLS keeps
        # the engine's message but not its code (the client sees INTERNAL):
        # past these checks, an engine failure is the server's, not the
        # request's.
        answer = await engine_request.async_exec()
        if answer.has_error():
            return pb_utils.InferenceResponse(error=answer.error())
        return pb_utils.InferenceResponse(
            output_tensors=[pb_utils.get_output_tensor_by_name(answer, name) for name in OUTPUTS]
        )
