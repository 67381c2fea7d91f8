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
from pathlib import Path

import triton_python_backend_utils as pb_utils
from model_common.errors import ErrorKind, error_message
from model_common.record import ExportRecord
from model_common.text_options import Prompts, prompt_text
from model_common.tokens import pad_rows
from model_common.triton import AdmissionDoor, invalid, read_texts
from tokenizers import Encoding, Tokenizer

Pairs = tuple[list[tuple[str, str]], bool]  # a request's pairs, and whether to truncate


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
    queries = read_texts(request, "QUERY", max_text_bytes)
    if isinstance(queries, pb_utils.TritonError):
        return queries
    documents = read_texts(request, "TEXT", max_text_bytes)
    if isinstance(documents, pb_utils.TritonError):
        return documents
    for index, query in enumerate(queries):
        if not query.strip():
            return invalid(
                error_message(
                    ErrorKind.INVALID_INPUT, f"QUERY[{index}] is empty: a query needs some text"
                )
            )
    return [
        (prompt + query, document) for query, document in zip(queries, documents, strict=True)
    ], truncate


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        version_dir = Path(args["model_repository"]) / args["model_version"]
        self._prompts = Prompts.from_record(ExportRecord.read(version_dir).fields)
        path = version_dir / "tokenizer.json"
        self._truncating = Tokenizer.from_file(str(path))
        truncation = self._truncating.truncation
        if truncation is None:
            raise pb_utils.TritonModelException(
                f"{path} sets no max length; write it with export/export_onnx.py"
            )
        self._max_length: int = truncation["max_length"]
        self._whole = Tokenizer.from_file(str(path))
        self._whole.no_truncation()
        parameters = config["parameters"]
        self._truncate = parameters["truncate"]["string_value"] == "true"
        self._max_text_bytes = int(parameters["max_text_bytes"]["string_value"])
        self._door = AdmissionDoor(args, parameters)

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        decoded = [
            _decode_pairs(request, self._max_text_bytes, self._truncate, self._prompts)
            for request in requests
        ]
        valid = [item for item in decoded if not isinstance(item, pb_utils.TritonError)]
        if valid:
            self._door.admit()
        encoded = iter(self._encode(valid))
        responses = [
            pb_utils.InferenceResponse(error=item)
            if isinstance(item, pb_utils.TritonError)
            else self._respond(next(encoded), item[1])
            for item in decoded
        ]
        self._door.released(responses)
        return responses

    def _encode(self, valid: list[Pairs]) -> list[list[Encoding]]:
        """Each request's encodings: one batch-encode call for the requests
        that truncate, one for those that do not."""
        encoded: dict[bool, list[Encoding]] = {}
        for truncate in {truncate for _, truncate in valid}:
            tokenizer = self._truncating if truncate else self._whole
            pairs = [pair for own, each in valid if each == truncate for pair in own]
            encoded[truncate] = tokenizer.encode_batch_fast(pairs)
        taken = dict.fromkeys(encoded, 0)
        requests = []
        for own, truncate in valid:
            start = taken[truncate]
            requests.append(encoded[truncate][start : start + len(own)])
            taken[truncate] += len(own)
        return requests

    def _respond(self, encodings: list[Encoding], truncate: bool) -> pb_utils.InferenceResponse:
        if not truncate:
            for index, encoding in enumerate(encodings):
                if len(encoding.ids) > self._max_length:
                    return pb_utils.InferenceResponse(
                        error=invalid(
                            error_message(
                                ErrorKind.INPUT_TOO_LARGE,
                                f"pair {index} (QUERY[{index}], TEXT[{index}]) has "
                                f"{len(encoding.ids)} tokens, over the model's max length "
                                f"{self._max_length} (truncation is off)",
                            )
                        )
                    )
        input_ids, attention_mask = pad_rows([encoding.ids for encoding in encodings])
        token_type_ids, _ = pad_rows([encoding.type_ids for encoding in encodings])
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("INPUT_IDS", input_ids),
                pb_utils.Tensor("ATTENTION_MASK", attention_mask),
                pb_utils.Tensor("TOKEN_TYPE_IDS", token_type_ids),
            ]
        )
