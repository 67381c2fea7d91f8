"""The ablation's starting point, step (a): one Python model does the whole
job the way a plain Python embedding server does: tokenize every text of the
batch and pad them all to the longest, one ONNX Runtime session on all cores,
and float output. Its `output` parameter picks the float form:
  json    EMBEDDING_JSON, each row the embedding as a JSON list of floats
          (what an HTTP/JSON embedding API sends);
  tensor  EMBEDDING (FP32) and NORM, for step (b) to put the C++ serializer
          behind it.
perf/ablation.py links 1/model.onnx and 1/tokenizer.json from the exported
model beside this file; no other model of the service uses this code.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        version_dir = Path(args["model_repository"]) / args["model_version"]
        self._output = config["parameters"]["output"]["string_value"]
        self._tokenizer = Tokenizer.from_file(str(version_dir / "tokenizer.json"))
        self._tokenizer.enable_padding()
        # ONNX Runtime's default: one session whose thread pool spans all cores.
        self._session = ort.InferenceSession(
            str(version_dir / "model.onnx"), providers=["CPUExecutionProvider"]
        )

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        texts = [
            [bytes(item).decode("utf-8", errors="replace") for item in raw.reshape(-1)]
            for raw in (
                pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
                for request in requests
            )
        ]
        encodings = self._tokenizer.encode_batch([text for own in texts for text in own])
        input_ids = np.array([encoding.ids for encoding in encodings], dtype=np.int64)
        attention_mask = np.array(
            [encoding.attention_mask for encoding in encodings], dtype=np.int64
        )
        embedding, norm = self._session.run(
            None, {"input_ids": input_ids, "attention_mask": attention_mask}
        )
        splits = np.cumsum([len(own) for own in texts])[:-1]
        return [
            self._response(rows, row_norms)
            for rows, row_norms in zip(
                np.split(embedding, splits), np.split(norm, splits), strict=True
            )
        ]

    def _response(self, embedding: np.ndarray, norm: np.ndarray) -> pb_utils.InferenceResponse:
        if self._output == "json":
            rows = np.array([[json.dumps(row.tolist())] for row in embedding], dtype=np.object_)
            return pb_utils.InferenceResponse([pb_utils.Tensor("EMBEDDING_JSON", rows)])
        return pb_utils.InferenceResponse(
            [pb_utils.Tensor("EMBEDDING", embedding), pb_utils.Tensor("NORM", norm)]
        )
