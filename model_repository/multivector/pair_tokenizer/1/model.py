"""Triton Python model: (query, document) rows -> a multi-vector encoder's
rows for each, the query's as MultiVectorEncoder.encode_query makes them and
the document's as encode_document does (model_common.multivector).

The first stage of a multi-vector encoder's rerank entry point
(`NAME_rerank`): the query and the document of a row are encoded apart, each
in its role with the model's prompt for the role, and scored by MaxSim after
the encoder. A bad text or an empty query refuses its request before any
tokenizing; good requests are tokenized once the encoder has room for both
of their encodings (model_common.admission). Each side's POOL_FACTORS say how
the encoder pools its vectors (model_common.token_pooling): the model's own
pooling where it covers the side's role, and for the documents the request's
pool_factor too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import triton_python_backend_utils as pb_utils
from model_common.door import AdmissionDoor
from model_common.embedder_setup import EmbedderSetup
from model_common.errors import ErrorKind, error_message
from model_common.multivector import DOCUMENT, QUERY, MultiVectorRoles, Rows
from model_common.multivector_tokenizing import RoleTexts, RoleTokenizers
from model_common.options import pool_factor, pool_factor_error
from model_common.request_io import invalid, read_queries, read_texts, triton_tensor
from model_common.stage import Stage
from model_common.tensors import (
    ATTENTION_MASK,
    INPUT_IDS,
    POOL_FACTORS,
    QUERY_ATTENTION_MASK,
    QUERY_INPUT_IDS,
    QUERY_POOL_FACTORS,
    QUERY_VECTOR_MASK,
    TEXT,
    VECTOR_MASK,
    StageIO,
)
from model_common.tensors import QUERY as QUERY_TEXT
from model_common.text_options import Prompts, prompt_text
from model_common.token_pooling import ModelPooling, row_factors
from tokenizers import Encoding

# The end a text over its role's max length is cut from, as MultiVectorEncoder cuts it.
TRUNCATED_END = "right"
# A request's queries, its documents, and the factors a query's and a document's rows are pooled by.
Pair = tuple[RoleTexts, RoleTexts, np.ndarray, np.ndarray]


class TritonPythonModel(Stage[Pair, list[list[Encoding]]]):
    io = StageIO(
        inputs=(QUERY_TEXT, TEXT),
        outputs=(
            QUERY_INPUT_IDS,
            QUERY_ATTENTION_MASK,
            QUERY_VECTOR_MASK,
            QUERY_POOL_FACTORS,
            INPUT_IDS,
            ATTENTION_MASK,
            VECTOR_MASK,
            POOL_FACTORS,
        ),
    )
    admission = AdmissionDoor

    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        fields = setup.record.fields
        prompts = Prompts.from_record(fields)
        self._prompts = {
            role: prompt_text({"input_type": role}, prompts) for role in (QUERY, DOCUMENT)
        }
        self._tokenizers = RoleTokenizers(
            setup.version_dir / "tokenizer.json", MultiVectorRoles.from_record(fields)
        )
        self._pooling = ModelPooling.from_record(fields)
        self._truncate = setup.text("truncate") == "true"
        self._max_text_bytes = setup.integer("max_text_bytes")

    def _decode(self, request: pb_utils.InferenceRequest) -> Pair | pb_utils.TritonError:
        parameters = json.loads(request.parameters())
        truncate = parameters.get("truncate", self._truncate)
        if not isinstance(truncate, bool):
            return invalid(
                error_message(ErrorKind.INVALID_PARAMETER, "must be a boolean", "truncate")
            )
        # The request's pool_factor pools the documents; a query never pools on request.
        bad_pooling = pool_factor_error(parameters, DOCUMENT)
        if bad_pooling:
            return invalid(bad_pooling)
        # The query is checked empty before its prompt goes before it.
        queries = read_queries(request, self._max_text_bytes)
        if isinstance(queries, pb_utils.TritonError):
            return queries
        documents = read_texts(request, TEXT, self._max_text_bytes, self._prompts[DOCUMENT])
        if isinstance(documents, pb_utils.TritonError):
            return documents
        truncation = TRUNCATED_END if truncate else None
        prompted = [self._prompts[QUERY] + query for query in queries]
        return (
            RoleTexts(QUERY, prompted, truncation),
            RoleTexts(DOCUMENT, documents, truncation),
            row_factors(self._pooling, QUERY, None),
            row_factors(self._pooling, DOCUMENT, pool_factor(parameters)),
        )

    def _run(self, batch: list[Pair]) -> list[list[list[Encoding]]]:
        encoded = iter(self._tokenizers.encode([entry for pair in batch for entry in pair[:2]]))
        return [[next(encoded), next(encoded)] for _ in batch]

    def _respond(self, item: Pair, encodings: list[list[Encoding]]) -> pb_utils.InferenceResponse:
        queries = self._tokenizers.rows(item[0], encodings[0], _query)
        if isinstance(queries, pb_utils.TritonError):
            return pb_utils.InferenceResponse(error=queries)
        documents = self._tokenizers.rows(item[1], encodings[1], _document)
        if isinstance(documents, pb_utils.TritonError):
            return pb_utils.InferenceResponse(error=documents)
        return pb_utils.InferenceResponse(output_tensors=_tensors(queries, documents, item))


def _tensors(queries: Rows, documents: Rows, item: Pair) -> list[pb_utils.Tensor]:
    rows = len(documents.input_ids)
    return [
        triton_tensor(QUERY_INPUT_IDS, queries.input_ids),
        triton_tensor(QUERY_ATTENTION_MASK, queries.attention_mask),
        triton_tensor(QUERY_VECTOR_MASK, queries.vector_mask),
        triton_tensor(QUERY_POOL_FACTORS, np.tile(item[2], (rows, 1))),
        triton_tensor(INPUT_IDS, documents.input_ids),
        triton_tensor(ATTENTION_MASK, documents.attention_mask),
        triton_tensor(VECTOR_MASK, documents.vector_mask),
        triton_tensor(POOL_FACTORS, np.tile(item[3], (rows, 1))),
    ]


def _query(index: int) -> str:
    return f"{QUERY_TEXT.name}[{index}]"


def _document(index: int) -> str:
    return f"{TEXT.name}[{index}]"
