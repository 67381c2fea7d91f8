"""The stable error kinds of the embedding service.

Every error a model of this project returns starts with its kind, then, for
a bad request parameter, the parameter's name in quotes:

    invalid_parameter 'dimensions': 999 is outside 1..384
    invalid_input: TEXT[2] is not valid UTF-8 (invalid start byte at byte 0)
    input_too_large: the request has 9000 tokens, over the limit of 8192 ...

Clients branch on the kind (embedding_client.errors parses it), never on the
rest of the text, which may change. The C++ serializer writes the same
grammar for its parameter errors.
"""

from __future__ import annotations

from enum import Enum


class ErrorKind(Enum):
    # A request parameter (dtype, dimensions, normalize) has a bad value.
    INVALID_PARAMETER = "invalid_parameter"
    # The inputs are malformed: empty, not UTF-8, shapes that disagree,
    # token ids outside the vocabulary.
    INVALID_INPUT = "invalid_input"
    # The inputs are well formed but over a configured limit: bytes per text,
    # tokens per text with truncation off, tokens per request.
    INPUT_TOO_LARGE = "input_too_large"


def error_message(kind: ErrorKind, detail: str, parameter: str | None = None) -> str:
    named = f" '{parameter}'" if parameter is not None else ""
    return f"{kind.value}{named}: {detail}"
