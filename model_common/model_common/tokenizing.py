"""What both tokenizer stages (texts, and a reranker's query-document pairs) share: the
model's tokenizer.json opened once per way of truncating a request may ask for, every request
Triton merged into an execute encoded in one batch-encode call per way, and a request refused
where a row is over the max length and the request turned truncation off. Importable only
inside a Triton Python-backend stub."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import triton_python_backend_utils as pb_utils
from tokenizers import Encoding, Tokenizer

from model_common.errors import ErrorKind, error_message
from model_common.request_io import invalid

# A way of truncating: the end an over-long row is cut from, or None: not cut.
Truncation = str | None
# What one row encodes: a text, or a (query, document) pair.
Row = str | tuple[str, str]


class Tokenizers:
    """The tokenizer.json export/ wrote (truncating at the max length, pairs longest first),
    once per way of truncating in `directions` and once without truncation; with `max_length`,
    at that length instead of the file's (a multi-vector model's role's)."""

    def __init__(
        self, path: Path, directions: Sequence[str], max_length: int | None = None
    ) -> None:
        truncation = Tokenizer.from_file(str(path)).truncation
        if truncation is None:
            raise pb_utils.TritonModelException(
                f"{path} sets no max length; write it with export/export_onnx.py"
            )
        self.max_length: int = max_length or truncation["max_length"]
        self._by_way: dict[Truncation, Tokenizer] = {}
        for direction in (*directions, None):
            tokenizer = Tokenizer.from_file(str(path))
            if direction is None:
                tokenizer.no_truncation()
            else:
                tokenizer.enable_truncation(self.max_length, direction=direction)
            self._by_way[direction] = tokenizer

    def encode(self, requests: Sequence[tuple[Sequence[Row], Truncation]]) -> list[list[Encoding]]:
        """Each request's encodings, in order: one batch-encode call per way of truncating
        among the requests."""
        encoded: dict[Truncation, Iterator[Encoding]] = {}
        for way in {way for _, way in requests}:
            rows = [row for own, each in requests if each == way for row in own]
            encoded[way] = iter(self._by_way[way].encode_batch_fast(rows))
        return [[next(encoded[way]) for _ in own] for own, way in requests]

    def too_long(
        self, encodings: Sequence[Encoding], named: Callable[[int], str]
    ) -> pb_utils.TritonError | None:
        """The refusal of a request whose row is over the max length, naming the first such
        row as `named` calls row i; None where every row fits."""
        for index, encoding in enumerate(encodings):
            if len(encoding.ids) > self.max_length:
                return invalid(
                    error_message(
                        ErrorKind.INPUT_TOO_LARGE,
                        f"{named(index)} has {len(encoding.ids)} tokens, over the model's max "
                        f"length {self.max_length} (truncation is off)",
                    )
                )
        return None
