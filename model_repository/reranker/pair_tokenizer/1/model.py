"""Triton Python model: (query, document) pairs -> token ids, attention
masks and token type ids, as a cross-encoder reads a pair.

The first stage of a reranker's entry point (`rerank`): a bad text or an
empty query refuses its request before any tokenizing; good requests are
tokenized only once the scorer has room (model_common.admission), in one
batch-encode call per execute, the longer text of a pair cut first where
it is over the model's max length (the truncation export/ wrote into
tokenizer.json, as CrossEncoder truncates). The `truncate` request
parameter (a boolean; the config's default) refuses an over-long pair
instead. The model's prompt (`prompt_name`, or `input_type`, else its
default prompt; model_common.text_options) goes before each query, as
CrossEncoder.predict(prompt_name=...) puts it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import triton_python_backend_utils as pb_utils
from model_common.door import AdmissionDoor
from model_common.embedder_setup import EmbedderSetup
from model_common.errors import ErrorKind, error_message
from model_common.request_io import invalid, read_queries, read_texts, triton_tensor
from model_common.stage import Stage
from model_common.tensors import (
    ATTENTION_MASK,
    INPUT_IDS,
    QUERY,
    TEXT,
    TOKEN_TYPE_IDS,
    StageIO,
)
from model_common.text_options import Prompts, prompt_text
from model_common.tokenizing import Tokenizers
from model_common.tokens import pad_rows
from tokenizers import Encoding

Pairs = tuple[list[tuple[str, str]], bool]  # a request's pairs, and whether to truncate
# The end CrossEncoder cuts a pair from, the longer text first, as export/ wrote tokenizer.json.
TRUNCATED_END = "right"


def _decode_pairs(
    request: pb_utils.InferenceRequest,
    max_text_bytes: int,
    truncate_default: bool,
    prompts: Prompts,
) -> Pairs | pb_utils.TritonError:
    """The request's pairs, each query after its prompt, and its truncation,
    or the error that refuses it."""
    parameters = json.loads(request.parameters())
    truncate = parameters.get("truncate", truncate_default)
    if not isinstance(truncate, bool):
        return invalid(error_message(ErrorKind.INVALID_PARAMETER, "must be a boolean", "truncate"))
    try:
        prompt = prompt_text(parameters, prompts)
    except ValueError as error:
        return invalid(str(error))
    # The query is checked empty before its prompt goes before it.
    queries = read_queries(request, max_text_bytes)
    if isinstance(queries, pb_utils.TritonError):
        return queries
    documents = read_texts(request, TEXT, max_text_bytes)
    if isinstance(documents, pb_utils.TritonError):
        return documents
    return [
        (prompt + query, document) for query, document in zip(queries, documents, strict=True)
    ], truncate


class TritonPythonModel(Stage[Pairs, list[Encoding]]):
    io = StageIO(inputs=(QUERY, TEXT), outputs=(INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS))
    admission = AdmissionDoor

    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        self._prompts = Prompts.from_record(setup.record.fields)
        # The file's truncation (the longer text of a pair first), and none.
        self._tokenizers = Tokenizers(setup.version_dir / "tokenizer.json", (TRUNCATED_END,))
        self._truncate = setup.text("truncate") == "true"
        self._max_text_bytes = setup.integer("max_text_bytes")

    def _decode(self, request: pb_utils.InferenceRequest) -> Pairs | pb_utils.TritonError:
        return _decode_pairs(request, self._max_text_bytes, self._truncate, self._prompts)

    def _run(self, batch: list[Pairs]) -> list[list[Encoding]]:
        return self._tokenizers.encode(
            [(pairs, TRUNCATED_END if truncate else None) for pairs, truncate in batch]
        )

    def _respond(self, item: Pairs, encodings: list[Encoding]) -> pb_utils.InferenceResponse:
        refusal = None if item[1] else self._tokenizers.too_long(encodings, _pair)
        if refusal is not None:
            return pb_utils.InferenceResponse(error=refusal)
        input_ids, attention_mask = pad_rows([encoding.ids for encoding in encodings])
        token_type_ids, _ = pad_rows([encoding.type_ids for encoding in encodings])
        return pb_utils.InferenceResponse(
            output_tensors=[
                triton_tensor(INPUT_IDS, input_ids),
                triton_tensor(ATTENTION_MASK, attention_mask),
                triton_tensor(TOKEN_TYPE_IDS, token_type_ids),
            ]
        )


def _pair(index: int) -> str:
    return f"pair {index} ({QUERY.name}[{index}], {TEXT.name}[{index}])"
