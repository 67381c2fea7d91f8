"""OpenAI's embeddings API: request parsing with OpenAI's limits, and
responses shaped exactly like OpenAI's.

base64 embeddings are the float32 little-endian bytes Triton returned; float
embeddings go from numpy to JSON through orjson, with no Python float list.

Beyond OpenAI's fields, a request may set the service's text options
(prompt_name, input_type, truncate, truncation_direction), which travel to
Triton as request parameters of the same names.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np
import orjson

from embedding_client.gateway.errors import ApiError, bad_request
from embedding_client.options import (
    INPUT_TYPES,
    TEXT_OPTIONS,
    TRUNCATION_DIRECTIONS,
    TextKwargs,
)

MAX_INPUTS = 2048
FIELDS = frozenset({"input", "model", "encoding_format", "dimensions", "user", *TEXT_OPTIONS})
EncodingFormat = Literal["float", "base64"]
ChoiceT = TypeVar("ChoiceT", bound=str)
TypedT = TypeVar("TypedT", str, bool)
_INPUT_SHAPES = (
    "a string, an array of strings, an array of token ids or an array of token-id arrays"
)


@dataclass(frozen=True)
class TokenLimits:
    max_length: int
    vocab_size: int


@dataclass(frozen=True)
class EmbeddingsRequest:
    """Exactly one of texts and token_rows is non-empty; text_options only
    with texts."""

    model: str
    texts: list[str]
    token_rows: list[list[int]]
    encoding_format: EncodingFormat
    dimensions: int | None
    text_options: TextKwargs


def parse_embeddings_request(
    body: bytes, served: Mapping[str, TokenLimits], tasks: Mapping[str, str]
) -> EmbeddingsRequest:
    """served: the limits of each embedding model this gateway serves, by
    name; tasks: every model it serves, by name, for a message naming the
    task of one that does not embed."""
    payload = json_object(body)
    unknown = sorted(payload.keys() - FIELDS)
    if unknown:
        raise bad_request(
            f"Unrecognized request argument supplied: {unknown[0]}", unknown[0], "unknown_parameter"
        )
    model = _model(payload, served, tasks)
    _optional_string(payload, "user")
    options = _text_options(payload)
    texts, token_rows = _input(payload.get("input"), served[model])
    if token_rows and options:
        field = next(iter(options))
        raise bad_request(
            f"'{field}' applies to text input only: token ids go to the model as given, "
            "without a prompt or truncation",
            field,
        )
    return EmbeddingsRequest(
        model, texts, token_rows, _encoding_format(payload), _dimensions(payload), options
    )


def json_object(body: bytes) -> dict[str, Any]:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise bad_request(
            f"The request body is not valid JSON: {error}", None, "invalid_json"
        ) from error
    if not isinstance(payload, dict):
        raise bad_request("The request body must be a JSON object", None, "invalid_json")
    return payload


def _model(payload: dict[str, Any], served: Mapping[str, object], tasks: Mapping[str, str]) -> str:
    model = payload.get("model")
    if not isinstance(model, str):
        raise bad_request(
            "'model' is required and must be a string", "model", "missing_required_parameter"
        )
    if model not in served:
        if model in tasks:
            raise bad_request(
                f"The model '{model}' does not embed (its task is '{tasks[model]}'): call "
                "its task's route (/v1/rerank for a reranker)",
                "model",
            )
        raise model_not_found(model, served)
    return model


def model_not_found(model: str, served: Mapping[str, object]) -> ApiError:
    names = ", ".join(f"'{name}'" for name in served)
    return ApiError(
        404,
        f"The model '{model}' does not exist; this gateway serves {names}",
        param="model",
        code="model_not_found",
    )


def _text_options(payload: dict[str, Any]) -> TextKwargs:
    """The text options a request sets (null is not set): types and choices
    only, since which prompts a model has is Triton's to say."""
    options = TextKwargs()
    if payload.get("prompt_name") is not None:
        options["prompt_name"] = _typed(payload, "prompt_name", str, "a string")
    if payload.get("input_type") is not None:
        options["input_type"] = _choice(payload, "input_type", INPUT_TYPES)
    if payload.get("truncate") is not None:
        options["truncate"] = _typed(payload, "truncate", bool, "a boolean")
    if payload.get("truncation_direction") is not None:
        options["truncation_direction"] = _choice(
            payload, "truncation_direction", TRUNCATION_DIRECTIONS
        )
    return options


def _typed(payload: dict[str, Any], field: str, kind: type[TypedT], what: str) -> TypedT:
    value = payload[field]
    if not isinstance(value, kind):
        raise bad_request(f"'{field}' must be {what}, got {value!r}", field)
    return value


def _choice(payload: dict[str, Any], field: str, choices: tuple[ChoiceT, ...]) -> ChoiceT:
    value = payload[field]
    for choice in choices:
        if value == choice:
            return choice
    expected = " or ".join(f"'{choice}'" for choice in choices)
    raise bad_request(f"'{field}' must be {expected}, got {value!r}", field)


def _optional_string(payload: dict[str, Any], field: str) -> None:
    value = payload.get(field)
    if value is not None and not isinstance(value, str):
        raise bad_request(f"'{field}' must be a string", field)


def _encoding_format(payload: dict[str, Any]) -> EncodingFormat:
    value = payload.get("encoding_format")
    if value is None or value == "float":
        return "float"
    if value == "base64":
        return "base64"
    raise bad_request(
        f"'encoding_format' must be 'float' or 'base64', got {value!r}", "encoding_format"
    )


def _dimensions(payload: dict[str, Any]) -> int | None:
    """Only the type and sign are checked here; Triton knows the model's width
    and rejects larger values with a message naming 'dimensions'."""
    value = payload.get("dimensions")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_request(f"'dimensions' must be a positive integer, got {value!r}", "dimensions")
    return value


def _is_token_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _input(value: object, limits: TokenLimits) -> tuple[list[str], list[list[int]]]:
    if value is None:
        raise bad_request("'input' is required", "input", "missing_required_parameter")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise bad_request(f"'input' must be {_INPUT_SHAPES}", "input")
    if not value:
        raise bad_request("'input' is an empty array", "input")
    if all(isinstance(item, str) for item in value):
        return _texts(value), []
    if all(_is_token_id(item) for item in value):
        return [], [_token_row(value, "input", limits)]
    if all(isinstance(item, list) for item in value):
        rows = [_token_row(row, f"input[{index}]", limits) for index, row in enumerate(value)]
        return [], _bounded(rows)
    raise bad_request(f"'input' must be {_INPUT_SHAPES}", "input")


def _bounded(items: list[Any]) -> list[Any]:
    if len(items) > MAX_INPUTS:
        raise bad_request(
            f"'input' has {len(items)} items; at most {MAX_INPUTS} are allowed", "input"
        )
    return items


def _texts(texts: list[str]) -> list[str]:
    for index, text in enumerate(texts):
        if not text:
            raise bad_request(f"'input[{index}]' is an empty string", "input")
    return _bounded(texts)


def _token_row(row: list[Any], where: str, limits: TokenLimits) -> list[int]:
    if not row:
        raise bad_request(f"'{where}' is an empty token array", "input")
    if len(row) > limits.max_length:
        raise bad_request(
            f"'{where}' has {len(row)} tokens; the model takes at most {limits.max_length}",
            "input",
            "context_length_exceeded",
        )
    for token in row:
        if not _is_token_id(token) or not 0 <= token < limits.vocab_size:
            raise bad_request(
                f"'{where}' holds {token!r}, not a token id in 0..{limits.vocab_size - 1}", "input"
            )
    return row


def render_embeddings(
    vectors: np.ndarray, encoding_format: EncodingFormat, model: str, prompt_tokens: int
) -> bytes:
    """vectors: float32 [N, k], little-endian as Triton sent them."""
    if encoding_format == "base64":
        embeddings: list[Any] = [base64.b64encode(row).decode("ascii") for row in vectors]
    else:
        embeddings = list(vectors)
    data = [
        {"object": "embedding", "index": index, "embedding": embedding}
        for index, embedding in enumerate(embeddings)
    ]
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return orjson.dumps(
        {"object": "list", "data": data, "model": model, "usage": usage},
        option=orjson.OPT_SERIALIZE_NUMPY,
    )


def pick_model(value: object, names: Sequence[str], tasks: Mapping[str, str], kind: str) -> str:
    """The model a request names among `names`, the gateway's models of one
    kind ("reranker", ...), or without a name the only one; tasks: every
    model the gateway serves, by name, for a message naming the task of a
    model of another kind."""
    if value is None:
        if len(names) == 1:
            return names[0]
        if not names:
            raise ApiError(404, f"This gateway serves no {kind}", param="model")
        listed = ", ".join(f"'{name}'" for name in names)
        raise bad_request(f"'model' is required: this gateway serves several ({listed})", "model")
    if not isinstance(value, str):
        raise bad_request(f"'model' must be a string, got {value!r}", "model")
    if value in names:
        return value
    if value in tasks:
        article = "an" if kind[0] in "aeiou" else "a"
        raise bad_request(
            f"The model '{value}' is not {article} {kind} (its task is '{tasks[value]}')", "model"
        )
    listed = ", ".join(f"'{name}'" for name in names) or "none"
    raise ApiError(
        404,
        f"The model '{value}' does not exist; this gateway's {kind}s: {listed}",
        param="model",
        code="model_not_found",
    )


def model_object(model: str, created: int, owned_by: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": created, "owned_by": owned_by}


def render_models(models: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"object": "list", "data": models})
