"""Triton Python model: UTF-8 texts -> a multi-vector encoder's rows, as
MultiVectorEncoder.encode_query or encode_document makes them.

The first stage of a multi-vector encoder's entry point (`NAME`): the request's
`input_type` is the role its texts are encoded in (query, or document where it
names none), which picks the model's prompt for the role, its max length, and
query expansion or the skip-list (model_common.multivector); a bad output or
text option or a bad text refuses the request before any tokenizing, and good
ones are tokenized only once the encoder has room (model_common.admission).
Beside the graph's inputs it writes VECTOR_MASK: the positions whose vectors
the serializer writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import triton_python_backend_utils as pb_utils
from model_common.door import AdmissionDoor
from model_common.embedder_setup import EmbedderSetup
from model_common.multivector import MultiVectorRoles, Rows
from model_common.multivector_tokenizing import RoleTexts, RoleTokenizers
from model_common.options import DECLARATION, multivector_option_error
from model_common.request_io import invalid, read_texts, triton_tensor
from model_common.stage import Stage
from model_common.tensors import ATTENTION_MASK, INPUT_IDS, TEXT, VECTOR_MASK, StageIO
from model_common.text_options import Prompts, text_options
from tokenizers import Encoding

# The role of a request that names none.
_DEFAULT_ROLE = DECLARATION["multivector"]["default_input_type"]


class TritonPythonModel(Stage[RoleTexts, list[Encoding]]):
    io = StageIO(inputs=(TEXT,), outputs=(INPUT_IDS, ATTENTION_MASK, VECTOR_MASK))
    admission = AdmissionDoor

    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        fields = setup.record.fields
        self._prompts = Prompts.from_record(fields)
        self._vector_dim = setup.record.embedding_dim
        self._tokenizers = RoleTokenizers(
            setup.version_dir / "tokenizer.json", MultiVectorRoles.from_record(fields)
        )
        self._truncate = setup.text("truncate") == "true"
        self._max_text_bytes = setup.integer("max_text_bytes")

    def _decode(self, request: pb_utils.InferenceRequest) -> RoleTexts | pb_utils.TritonError:
        parameters = json.loads(request.parameters())
        bad_option = multivector_option_error(parameters, self._vector_dim)
        if bad_option:
            return invalid(bad_option)
        # A request naming neither a role nor a prompt gets the default role's prompt, as
        # encode_document gives its texts (never the model's default prompt).
        if parameters.get("input_type") is None and parameters.get("prompt_name") is None:
            parameters["input_type"] = _DEFAULT_ROLE
        options = text_options(parameters, self._prompts, self._truncate)
        if isinstance(options, str):
            return invalid(options)
        texts = read_texts(request, TEXT, self._max_text_bytes, options.prompt)
        if isinstance(texts, pb_utils.TritonError):
            return texts
        # text_options checked input_type: it names a role where given.
        role = str(parameters.get("input_type") or _DEFAULT_ROLE)
        return RoleTexts(role, texts, options.direction if options.truncate else None)

    def _run(self, batch: list[RoleTexts]) -> list[list[Encoding]]:
        return self._tokenizers.encode(batch)

    def _respond(self, item: RoleTexts, encodings: list[Encoding]) -> pb_utils.InferenceResponse:
        rows = self._tokenizers.rows(item, encodings, _text)
        if isinstance(rows, pb_utils.TritonError):
            return pb_utils.InferenceResponse(error=rows)
        return pb_utils.InferenceResponse(output_tensors=_tensors(rows))


def _tensors(rows: Rows) -> list[pb_utils.Tensor]:
    return [
        triton_tensor(INPUT_IDS, rows.input_ids),
        triton_tensor(ATTENTION_MASK, rows.attention_mask),
        triton_tensor(VECTOR_MASK, rows.vector_mask),
    ]


def _text(index: int) -> str:
    return f"{TEXT.name}[{index}]"
