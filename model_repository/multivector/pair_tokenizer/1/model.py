"""Triton Python model: (query, document) rows -> a multi-vector encoder's
rows for each, the query's as MultiVectorEncoder.encode_query makes them and
the document's as encode_document does (model_common.multivector).

The first stage of a multi-vector encoder's rerank entry point
(`NAME_rerank`): the query and the document of a row are encoded apart, each
in its role with the model's prompt for the role, and scored by MaxSim after
the encoder. A bad text or an empty query refuses its request before any
tokenizing; good requests are tokenized once the encoder has room for both
of their encodings (model_common.admission).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import triton_python_backend_utils as pb_utils
from model_common.door import AdmissionDoor
from model_common.embedder_setup import EmbedderSetup
from model_common.errors import ErrorKind, error_message
from model_common.multivector import DOCUMENT, QUERY, MultiVectorRoles, Rows
from model_common.multivector_tokenizing import RoleTexts, RoleTokenizers
from model_common.request_io import invalid, read_texts, triton_tensor
from model_common.stage import Stage
from model_common.tensors import (
    ATTENTION_MASK,
    INPUT_IDS,
    QUERY_ATTENTION_MASK,
    QUERY_INPUT_IDS,
    QUERY_VECTOR_MASK,
    TEXT,
    VECTOR_MASK,
    StageIO,
)
from model_common.tensors import QUERY as QUERY_TEXT
from model_common.text_options import Prompts, prompt_text
from tokenizers import Encoding

# The end a text over its role's max length is cut from, as MultiVectorEncoder cuts it.
TRUNCATED_END = "right"
Pair = tuple[RoleTexts, RoleTexts]  # a request's queries, and its documents


class TritonPythonModel(Stage[Pair, list[list[Encoding]]]):
    io = StageIO(
        inputs=(QUERY_TEXT, TEXT),
        outputs=(
            QUERY_INPUT_IDS,
            QUERY_ATTENTION_MASK,
            QUERY_VECTOR_MASK,
            INPUT_IDS,
            ATTENTION_MASK,
            VECTOR_MASK,
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
        self._truncate = setup.text("truncate") == "true"
        self._max_text_bytes = setup.integer("max_text_bytes")

    def _decode(self, request: pb_utils.InferenceRequest) -> Pair | pb_utils.TritonError:
        truncate = json.loads(request.parameters()).get("truncate", self._truncate)
        if not isinstance(truncate, bool):
            return invalid(
                error_message(ErrorKind.INVALID_PARAMETER, "must be a boolean", "truncate")
            )
        # The query is checked empty before its prompt goes before it.
        queries = read_texts(request, QUERY_TEXT, self._max_text_bytes)
        if isinstance(queries, pb_utils.TritonError):
            return queries
        documents = read_texts(request, TEXT, self._max_text_bytes, self._prompts[DOCUMENT])
        if isinstance(documents, pb_utils.TritonError):
            return documents
        for index, query in enumerate(queries):
            if not query.strip():
                return invalid(
                    error_message(
                        ErrorKind.INVALID_INPUT,
                        f"{QUERY_TEXT.name}[{index}] is empty: a query needs some text",
                    )
                )
        truncation = TRUNCATED_END if truncate else None
        prompted = [self._prompts[QUERY] + query for query in queries]
        return RoleTexts(QUERY, prompted, truncation), RoleTexts(DOCUMENT, documents, truncation)

    def _run(self, batch: list[Pair]) -> list[list[list[Encoding]]]:
        encoded = iter(self._tokenizers.encode([entry for pair in batch for entry in pair]))
        return [[next(encoded), next(encoded)] for _ in batch]

    def _respond(self, item: Pair, encodings: list[list[Encoding]]) -> pb_utils.InferenceResponse:
        queries = self._tokenizers.rows(item[0], encodings[0], _query)
        if isinstance(queries, pb_utils.TritonError):
            return pb_utils.InferenceResponse(error=queries)
        documents = self._tokenizers.rows(item[1], encodings[1], _document)
        if isinstance(documents, pb_utils.TritonError):
            return pb_utils.InferenceResponse(error=documents)
        return pb_utils.InferenceResponse(output_tensors=_tensors(queries, documents))


def _tensors(queries: Rows, documents: Rows) -> list[pb_utils.Tensor]:
    return [
        triton_tensor(QUERY_INPUT_IDS, queries.input_ids),
        triton_tensor(QUERY_ATTENTION_MASK, queries.attention_mask),
        triton_tensor(QUERY_VECTOR_MASK, queries.vector_mask),
        triton_tensor(INPUT_IDS, documents.input_ids),
        triton_tensor(ATTENTION_MASK, documents.attention_mask),
        triton_tensor(VECTOR_MASK, documents.vector_mask),
    ]


def _query(index: int) -> str:
    return f"{QUERY_TEXT.name}[{index}]"


def _document(index: int) -> str:
    return f"{TEXT.name}[{index}]"
