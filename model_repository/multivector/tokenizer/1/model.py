"""Triton Python model: UTF-8 texts -> a multi-vector encoder's rows, as
MultiVectorEncoder.encode_query or encode_document makes them.

The first stage of a multi-vector encoder's entry point (`NAME`): the request's
`input_type` is the role its texts are encoded in (query, or document where it
names none), which picks the model's prompt for the role, its max length, and
query expansion or the skip-list (model_common.multivector); a bad output or
text option, a bad MUVERA parameter (model_common.options.muvera_option_error)
or a bad text refuses the request before any tokenizing, and good
ones are tokenized only once the encoder has room (model_common.admission).
Beside the graph's inputs it writes VECTOR_MASK, the positions whose vectors
are served, and POOL_FACTORS, how the encoder pools them
(model_common.token_pooling): the model's own pooling where it covers the
role, then the request's pool_factor, which only a document request takes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import triton_python_backend_utils as pb_utils
from model_common.door import AdmissionDoor
from model_common.embedder_setup import EmbedderSetup
from model_common.multivector import MultiVectorRoles, Rows
from model_common.multivector_tokenizing import RoleTexts, RoleTokenizers
from model_common.options import (
    DECLARATION,
    multivector_option_error,
    muvera_option_error,
    pool_factor,
    pool_factor_error,
)
from model_common.request_io import invalid, read_texts, triton_tensor
from model_common.stage import Stage
from model_common.tensors import (
    ATTENTION_MASK,
    INPUT_IDS,
    POOL_FACTORS,
    TEXT,
    VECTOR_MASK,
    StageIO,
)
from model_common.text_options import Prompts, text_options
from model_common.token_pooling import ModelPooling, row_factors
from tokenizers import Encoding

# The role of a request that names none.
_DEFAULT_ROLE = DECLARATION["multivector"]["default_input_type"]


# A request's texts in their role, and the factors each of its rows is pooled by.
Request = tuple[RoleTexts, np.ndarray]


class TritonPythonModel(Stage[Request, list[Encoding]]):
    io = StageIO(inputs=(TEXT,), outputs=(INPUT_IDS, ATTENTION_MASK, VECTOR_MASK, POOL_FACTORS))
    admission = AdmissionDoor

    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        fields = setup.record.fields
        self._prompts = Prompts.from_record(fields)
        self._vector_dim = setup.record.embedding_dim
        self._pooling = ModelPooling.from_record(fields)
        self._tokenizers = RoleTokenizers(
            setup.version_dir / "tokenizer.json", MultiVectorRoles.from_record(fields)
        )
        self._truncate = setup.text("truncate") == "true"
        self._max_text_bytes = setup.integer("max_text_bytes")

    def _decode(self, request: pb_utils.InferenceRequest) -> Request | pb_utils.TritonError:
        parameters = json.loads(request.parameters())
        # The MUVERA parameters are NAME_muvera's (its muvera stage's), checked here with the
        # others so that a bad one costs no tokenizing; the other entry points ignore them.
        bad_option = multivector_option_error(parameters, self._vector_dim) or muvera_option_error(
            parameters, self._vector_dim
        )
        if bad_option:
            return invalid(bad_option)
        # A request naming neither a role nor a prompt gets the default role's prompt, as
        # encode_document gives its texts (never the model's default prompt).
        if parameters.get("input_type") is None and parameters.get("prompt_name") is None:
            parameters["input_type"] = _DEFAULT_ROLE
        options = text_options(parameters, self._prompts, self._truncate)
        if isinstance(options, str):
            return invalid(options)
        # text_options checked input_type: it names a role where given.
        role = str(parameters.get("input_type") or _DEFAULT_ROLE)
        bad_pooling = pool_factor_error(parameters, role)
        if bad_pooling:
            return invalid(bad_pooling)
        texts = read_texts(request, TEXT, self._max_text_bytes, options.prompt)
        if isinstance(texts, pb_utils.TritonError):
            return texts
        factors = row_factors(self._pooling, role, pool_factor(parameters))
        return RoleTexts(role, texts, options.direction if options.truncate else None), factors

    def _run(self, batch: list[Request]) -> list[list[Encoding]]:
        return self._tokenizers.encode([texts for texts, _ in batch])

    def _respond(self, item: Request, encodings: list[Encoding]) -> pb_utils.InferenceResponse:
        texts, factors = item
        rows = self._tokenizers.rows(texts, encodings, _text)
        if isinstance(rows, pb_utils.TritonError):
            return pb_utils.InferenceResponse(error=rows)
        return pb_utils.InferenceResponse(output_tensors=_tensors(rows, factors))


def _tensors(rows: Rows, factors: np.ndarray) -> list[pb_utils.Tensor]:
    return [
        triton_tensor(INPUT_IDS, rows.input_ids),
        triton_tensor(ATTENTION_MASK, rows.attention_mask),
        triton_tensor(VECTOR_MASK, rows.vector_mask),
        triton_tensor(POOL_FACTORS, np.tile(factors, (len(rows.input_ids), 1))),
    ]


def _text(index: int) -> str:
    return f"{TEXT.name}[{index}]"
