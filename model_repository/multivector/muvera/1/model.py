"""Triton Python model: each text's token vectors -> its MUVERA fixed-dimensional encoding
(model_common.muvera), one vector whose dot product with another text's approximates their
MaxSim, as fastembed's Muvera.process_query or process_document gives it.

The stage between a multi-vector encoder's encoder and its serializer in `NAME_muvera`: it
reads the positions the encoder serves (VECTOR_MASK, the encoder's SERVED_MASK) and writes per
text a row of one vector, [1, F] with a mask of 1, which the multi-vector serializer writes in
the request's dtype. The request's input_type is the role (query: summed per partition;
document, the default: averaged, empty partitions filled); its muvera_* parameters, checked by
the tokenizer, choose the encoding.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import triton_python_backend_utils as pb_utils
from model_common.door import WorkCounter
from model_common.embedder_setup import EmbedderSetup
from model_common.multivector import QUERY
from model_common.muvera import cached_draws, encode_document, encode_query
from model_common.options import muvera_parameters
from model_common.request_io import input_array, triton_tensor
from model_common.stage import Stage
from model_common.tensors import MUVERA_MASK, MUVERA_VECTORS, TOKEN_VECTORS, VECTOR_MASK, StageIO

# A request's token vectors [N, T, D], the positions served [N, T], and its parameters.
Request = tuple[np.ndarray, np.ndarray, Mapping[str, object]]


class TritonPythonModel(Stage[Request, np.ndarray]):
    io = StageIO(inputs=(TOKEN_VECTORS, VECTOR_MASK), outputs=(MUVERA_VECTORS, MUVERA_MASK))
    admission = WorkCounter

    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        """Nothing to load: the draws depend on each request's parameters and the vectors'
        width, and are drawn at the first request that needs them."""

    def _decode(self, request: pb_utils.InferenceRequest) -> Request:
        vectors, mask = (input_array(request, tensor) for tensor in self.io.inputs)
        return vectors, mask, json.loads(request.parameters())

    def _run(self, batch: list[Request]) -> list[np.ndarray]:
        return [_encodings(*request) for request in batch]

    def _respond(self, item: Request, result: np.ndarray) -> pb_utils.InferenceResponse:
        # One vector per text: the serializer writes the row's count as 1.
        mask = np.ones((len(result), 1), np.int64)
        return pb_utils.InferenceResponse(
            output_tensors=[triton_tensor(MUVERA_VECTORS, result), triton_tensor(MUVERA_MASK, mask)]
        )


def _encodings(
    vectors: np.ndarray, mask: np.ndarray, parameters: Mapping[str, object]
) -> np.ndarray:
    """[N, 1, F] float32: each text's encoding of its served vectors in the request's role."""
    draws = cached_draws(muvera_parameters(parameters), vectors.shape[2])
    # The tokenizer has checked input_type: a role, or none for the default, document.
    encode = encode_query if parameters.get("input_type") == QUERY else encode_document
    encoded = [encode(text[served != 0], draws) for text, served in zip(vectors, mask, strict=True)]
    return np.stack(encoded).astype(np.float32)[:, None, :]
