"""Triton Python model: UTF-8 texts -> token ids and attention masks.

The first stage of a model's text entry point (`embed`): a request with a
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
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils
from model_common.admission import METRICS_URL_VARIABLE, BacklogGate
from model_common.backlog import RELEASED, Backlog
from model_common.errors import ErrorKind, error_message
from model_common.options import option_error
from model_common.record import ExportRecord
from model_common.text_options import TRUNCATION_DIRECTIONS, Prompts, TextOptions, text_options
from model_common.triton import invalid
from tokenizers import Encoding, Tokenizer


def _decode_texts(
    request: pb_utils.InferenceRequest,
    max_text_bytes: int,
    embedding_dim: int,
    prompts: Prompts,
    truncate: bool,
) -> tuple[list[str], TextOptions] | pb_utils.TritonError:
    """The request's texts, each with its prompt before it, and its text
    options; or the error that refuses the request."""
    parameters = json.loads(request.parameters())
    bad_option = option_error(parameters, embedding_dim)
    if bad_option:
        return invalid(bad_option)
    options = text_options(parameters, prompts, truncate)
    if isinstance(options, str):
        return invalid(options)
    raw = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
    if raw.size == 0:
        return invalid(
            error_message(ErrorKind.INVALID_INPUT, "TEXT is empty: send at least one text")
        )
    texts = []
    for index, item in enumerate(raw):
        if len(item) > max_text_bytes:
            return invalid(
                error_message(
                    ErrorKind.INPUT_TOO_LARGE,
                    f"TEXT[{index}] has {len(item)} bytes, over the limit of {max_text_bytes} "
                    "(max_text_bytes)",
                )
            )
        try:
            texts.append(options.prompt + bytes(item).decode("utf-8"))
        except UnicodeDecodeError as error:
            return invalid(
                error_message(
                    ErrorKind.INVALID_INPUT,
                    f"TEXT[{index}] is not valid UTF-8 ({error.reason} at byte {error.start})",
                )
            )
    return texts, options


def _pad(encodings: list[Encoding]) -> tuple[np.ndarray, np.ndarray]:
    length = max(len(encoding.ids) for encoding in encodings)
    input_ids = np.zeros((len(encodings), length), dtype=np.int64)
    attention_mask = np.zeros((len(encodings), length), dtype=np.int64)
    for row, encoding in enumerate(encodings):
        input_ids[row, : len(encoding.ids)] = encoding.ids
        attention_mask[row, : len(encoding.ids)] = 1
    return input_ids, attention_mask


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        version_dir = Path(args["model_repository"]) / args["model_version"]
        record = ExportRecord.read(version_dir)
        # The embedding width bounds the `dimensions` option checked here.
        self._embedding_dim = record.embedding_dim
        self._prompts = Prompts.from_record(record.fields)
        path = version_dir / "tokenizer.json"
        tokenizer = Tokenizer.from_file(str(path))
        truncation = tokenizer.truncation
        if truncation is None:
            raise pb_utils.TritonModelException(
                f"{path} sets no max length; write it with export/export_onnx.py"
            )
        self._max_length: int = truncation["max_length"]
        # One tokenizer per way of truncating a request may ask for (None:
        # not truncated), so each execute encodes each group in one call.
        self._tokenizers: dict[str | None, Tokenizer] = {}
        for direction in (*TRUNCATION_DIRECTIONS, None):
            each = Tokenizer.from_file(str(path))
            if direction is None:
                each.no_truncation()
            else:
                each.enable_truncation(self._max_length, direction=direction)
            self._tokenizers[direction] = each
        parameters = config["parameters"]
        self._truncate = parameters["truncate"]["string_value"] == "true"
        self._max_text_bytes = int(parameters["max_text_bytes"]["string_value"])
        metrics_url = os.environ.get(METRICS_URL_VARIABLE)
        if not metrics_url:
            raise pb_utils.TritonModelException(
                f"{METRICS_URL_VARIABLE} is not set: start the server with server/launch.py, "
                "which names its metrics endpoint there"
            )
        embedder = parameters["embedder_model"]["string_value"]
        backlog = Backlog(embedder)
        self._released = backlog.own(RELEASED, args["model_instance_name"])
        self._gate = BacklogGate(
            metrics_url,
            embedder,
            int(parameters["max_embedder_backlog"]["string_value"]),
            backlog,
        )

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        decoded = [
            _decode_texts(
                request, self._max_text_bytes, self._embedding_dim, self._prompts, self._truncate
            )
            for request in requests
        ]
        valid = [item for item in decoded if not isinstance(item, pb_utils.TritonError)]
        if valid:
            self._admit()
        encoded = iter(self._encode(valid))
        responses = [
            pb_utils.InferenceResponse(error=item)
            if isinstance(item, pb_utils.TritonError)
            else self._respond(next(encoded), item[1])
            for item in decoded
        ]
        # What goes on to the embedder's queue, for the door's estimate.
        self._released.add(sum(not response.has_error() for response in responses))
        return responses

    def _encode(self, valid: list[tuple[list[str], TextOptions]]) -> list[list[Encoding]]:
        """Each request's encodings: one batch-encode call per way of
        truncating among the requests Triton merged."""
        keys = [options.direction if options.truncate else None for _, options in valid]
        encodings: dict[str | None, Iterator[Encoding]] = {}
        for key in set(keys):
            texts = [
                text for (own, _), k in zip(valid, keys, strict=True) if k == key for text in own
            ]
            encodings[key] = iter(self._tokenizers[key].encode_batch_fast(texts))
        return [
            [next(encodings[key]) for _ in own] for (own, _), key in zip(valid, keys, strict=True)
        ]

    def _admit(self) -> None:
        """Holds this execute until the embedder has room. Unreadable metrics
        admit at once: a slower refusal beats a stalled pipeline."""
        try:
            self._gate.wait()
        except OSError as error:
            pb_utils.Logger.log_warn(f"admission: cannot read the embedder's backlog ({error})")

    def _respond(
        self, encodings: list[Encoding], options: TextOptions
    ) -> pb_utils.InferenceResponse:
        if not options.truncate:
            for index, encoding in enumerate(encodings):
                if len(encoding.ids) > self._max_length:
                    return pb_utils.InferenceResponse(
                        error=invalid(
                            error_message(
                                ErrorKind.INPUT_TOO_LARGE,
                                f"TEXT[{index}] has {len(encoding.ids)} tokens, over the "
                                f"model's max length {self._max_length} (truncation is off)",
                            )
                        )
                    )
        input_ids, attention_mask = _pad(encodings)
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("INPUT_IDS", input_ids),
                pb_utils.Tensor("ATTENTION_MASK", attention_mask),
            ]
        )
