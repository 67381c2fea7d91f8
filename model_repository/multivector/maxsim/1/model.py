"""Triton Python model: a query's token vectors against a document's, one
pair per row -> the pair's late-interaction score, MaxSim: for each of the
query's vectors the largest dot product with any of the document's, summed
over the query's vectors, as MultiVectorEncoder.similarity scores. Only the
positions each VECTOR_MASK names count (query expansion, the skip-list).

The last stage of a multi-vector encoder's rerank entry point
(`NAME_rerank`). A document with no vector at all (every token skipped)
scores 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import triton_python_backend_utils as pb_utils
from model_common.door import WorkCounter
from model_common.embedder_setup import EmbedderSetup
from model_common.multivector import maxsim
from model_common.request_io import input_array, triton_tensor
from model_common.stage import Stage
from model_common.tensors import (
    QUERY_VECTOR_MASK,
    QUERY_VECTORS,
    SCORE,
    TOKEN_VECTORS,
    VECTOR_MASK,
    StageIO,
)

# A request's query vectors and mask, then its documents'.
Pairs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class TritonPythonModel(Stage[Pairs, np.ndarray]):
    io = StageIO(
        inputs=(QUERY_VECTORS, QUERY_VECTOR_MASK, TOKEN_VECTORS, VECTOR_MASK), outputs=(SCORE,)
    )
    admission = WorkCounter

    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        """Nothing to load: the scores need only the vectors."""

    def _decode(self, request: pb_utils.InferenceRequest) -> Pairs:
        queries, query_mask, documents, mask = (
            input_array(request, tensor) for tensor in self.io.inputs
        )
        return queries, query_mask, documents, mask

    def _run(self, batch: list[Pairs]) -> list[np.ndarray]:
        return [maxsim(*pairs) for pairs in batch]

    def _respond(self, item: Pairs, result: np.ndarray) -> pb_utils.InferenceResponse:
        return pb_utils.InferenceResponse(output_tensors=[triton_tensor(SCORE, result)])
