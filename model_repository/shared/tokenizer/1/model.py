"""Triton Python model: UTF-8 texts -> token ids and attention masks.

The first stage of a model's text entry point (`embed`, a sparse encoder's): a request with a
bad output or text option (model_common.options, model_common.text_options)
or a bad text is refused here, before any tokenizing; a good one's texts get
the prompt it asks for and are truncated the way it asks; and good ones are tokenized
only once the embedder has room for them (model_common.admission), so that
under overload requests wait, or are refused, untokenized. One batch-encode
call per execute covers every request Triton merged; each request's rows are
then padded to that request's longest text only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import partial

import triton_python_backend_utils as pb_utils
from model_common.door import AdmissionDoor
from model_common.embedder_setup import EmbedderSetup
from model_common.options import option_error, sparse_option_error
from model_common.record import ExportRecord
from model_common.request_io import invalid, read_texts, triton_tensor
from model_common.stage import Stage
from model_common.tensors import ATTENTION_MASK, INPUT_IDS, TEXT, StageIO
from model_common.text_options import TRUNCATION_DIRECTIONS, Prompts, TextOptions, text_options
from model_common.tokenizing import Tokenizers
from model_common.tokens import pad_rows
from tokenizers import Encoding

OptionCheck = Callable[[Mapping[str, object]], str | None]
Texts = tuple[list[str], TextOptions]  # a request's texts, each after its prompt, and its options


def _row_option_check(record: ExportRecord) -> OptionCheck:
    """The check of the options that shape the rows the model's entry point
    answers: a sparse encoder's sparse rows, else embedding rows."""
    if record.fields.get("task") == "sparse":
        return partial(sparse_option_error, vocab_size=record.vocab_size)
    # The embedding width bounds the `dimensions` option.
    return partial(option_error, embedding_dim=record.embedding_dim)


def _decode_texts(
    request: pb_utils.InferenceRequest,
    max_text_bytes: int,
    option_check: OptionCheck,
    prompts: Prompts,
    truncate: bool,
) -> Texts | pb_utils.TritonError:
    """The request's texts, each with its prompt before it, and its text
    options; or the error that refuses the request."""
    parameters = json.loads(request.parameters())
    bad_option = option_check(parameters)
    if bad_option:
        return invalid(bad_option)
    options = text_options(parameters, prompts, truncate)
    if isinstance(options, str):
        return invalid(options)
    texts = read_texts(request, TEXT, max_text_bytes, options.prompt)
    return texts if isinstance(texts, pb_utils.TritonError) else (texts, options)


class TritonPythonModel(Stage[Texts, list[Encoding]]):
    io = StageIO(inputs=(TEXT,), outputs=(INPUT_IDS, ATTENTION_MASK))
    admission = AdmissionDoor

    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        self._option_check = _row_option_check(setup.record)
        self._prompts = Prompts.from_record(setup.record.fields)
        # One tokenizer per way of truncating a request may ask for, so each
        # execute encodes each group in one call.
        self._tokenizers = Tokenizers(setup.version_dir / "tokenizer.json", TRUNCATION_DIRECTIONS)
        self._truncate = setup.text("truncate") == "true"
        self._max_text_bytes = setup.integer("max_text_bytes")

    def _decode(self, request: pb_utils.InferenceRequest) -> Texts | pb_utils.TritonError:
        return _decode_texts(
            request, self._max_text_bytes, self._option_check, self._prompts, self._truncate
        )

    def _run(self, batch: list[Texts]) -> list[list[Encoding]]:
        return self._tokenizers.encode(
            [(texts, options.direction if options.truncate else None) for texts, options in batch]
        )

    def _respond(self, item: Texts, encodings: list[Encoding]) -> pb_utils.InferenceResponse:
        refusal = None if item[1].truncate else self._tokenizers.too_long(encodings, _text)
        if refusal is not None:
            return pb_utils.InferenceResponse(error=refusal)
        input_ids, attention_mask = pad_rows([encoding.ids for encoding in encodings])
        return pb_utils.InferenceResponse(
            output_tensors=[
                triton_tensor(INPUT_IDS, input_ids),
                triton_tensor(ATTENTION_MASK, attention_mask),
            ]
        )


def _text(index: int) -> str:
    return f"{TEXT.name}[{index}]"
