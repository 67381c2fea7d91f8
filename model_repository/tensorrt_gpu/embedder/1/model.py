"""Triton Python model: the checks in front of the TensorRT engine.

Each request is checked as every embedder checks it (model_common: output
options, row length, tokens per request, ids inside the vocabulary); a bad
one gets its error, and each good one goes unchanged, on its own, to the
engine model `embedder_engine` through BLS, all of one execute call's
requests at once (the run step awaits them: model_common.stage). The
engine's answer (or its error) is the request's.

The limits are the engine's own: <this repository>/embedder_engine/1/
engine.json, written by export/export_tensorrt.py from the ONNX export's
record, so the repository deploys on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import triton_python_backend_utils as pb_utils
from model_common.embedder import EmbeddingStage
from model_common.embedder_setup import EmbedderSetup
from model_common.record import ExportRecord, read_fields
from model_common.request_io import triton_tensor
from model_common.rows import Tokens
from model_common.tensors import EMBEDDER_IO

ENGINE = "embedder_engine"
RECORD_KEYS = ("embedding_dim", "max_seq_length", "vocab_size")


def read_engine_record(path: Path) -> dict[str, int]:
    """The fields of engine.json this model checks requests against."""
    fields = read_fields(path, RECORD_KEYS, "export/export_tensorrt.py")
    return {key: int(str(fields[key])) for key in RECORD_KEYS}


class TritonPythonModel(EmbeddingStage["pb_utils.InferenceResponse"]):
    def _read_record(self, version_dir: Path) -> ExportRecord:
        # The engine's folder beside this model's: <repository>/embedder_engine/1.
        fields = read_engine_record(version_dir.parent.parent / ENGINE / "1" / "engine.json")
        return ExportRecord(fields["max_seq_length"], fields["vocab_size"], dict(fields))

    def _open(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        # The engine runs on the GPU; its outputs come back in CPU memory,
        # copied there by Triton: the next stage (the serializer) reads them
        # on the host anyway, and so they pass on as they are.
        self._output_memory = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)

    async def _run(
        self, batch: list[Tokens]
    ) -> list[pb_utils.InferenceResponse | pb_utils.TritonError]:
        return list(await asyncio.gather(*(self._ask_engine(tokens) for tokens in batch)))

    async def _ask_engine(
        self, tokens: Tokens
    ) -> pb_utils.InferenceResponse | pb_utils.TritonError:
        engine_request = pb_utils.InferenceRequest(
            model_name=ENGINE,
            inputs=[
                triton_tensor(tensor, array)
                for tensor, array in zip(EMBEDDER_IO.inputs, tokens, strict=True)
            ],
            requested_output_names=[tensor.name for tensor in EMBEDDER_IO.outputs],
            preferred_memory=self._output_memory,
        )
        # A failed BLS call comes back as a response with an error, never as
        # an exception, so it fails only this request. Triton 2.51's BLS keeps
        # the engine's message but not its code (the client sees INTERNAL):
        # past these checks, an engine failure is the server's, not the
        # request's.
        answer = await engine_request.async_exec()
        return answer.error() if answer.has_error() else answer

    def _respond(
        self, item: Tokens, result: pb_utils.InferenceResponse
    ) -> pb_utils.InferenceResponse:
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.get_output_tensor_by_name(result, tensor.name)
                for tensor in EMBEDDER_IO.outputs
            ]
        )
