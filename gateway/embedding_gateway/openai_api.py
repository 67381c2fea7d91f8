"""OpenAI's embeddings and models APIs: the request and response bodies,
declared once here, from which requests are validated, refusals worded
(refusals.py) and the OpenAPI document written (openapi.py); responses are
shaped exactly like OpenAI's.

base64 embeddings are the float32 little-endian bytes Triton returned; float
embeddings go from numpy to JSON through orjson, with no Python float list.

Beyond OpenAI's fields, a request may set the service's text options
(prompt_name, input_type, truncate, truncation_direction), which travel to
Triton as request parameters of the same names. What depends on the model
(its token ids, its max length, its width, its prompts) is checked after
the schema: here for token ids, by Triton for the rest.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast, get_args

import numpy as np
import orjson
from embedding_client.options import ROW_OPTIONS, TEXT_OPTION_DECLARATIONS, TextKwargs, listed
from pydantic import BaseModel, Discriminator, Field, Tag
from typing_extensions import TypedDict

from embedding_gateway.errors import bad_request
from embedding_gateway.fields import (
    NON_EMPTY_TEXT,
    STRICT,
    Phrase,
    choices,
    one_text_or_many,
    option_type,
)
from embedding_gateway.refusals import OPENAI_WORDS, parse
from embedding_gateway.served_models import ServedModels

# OpenAI's bound on inputs per request.
MAX_INPUTS = 2048
EncodingFormat = Literal["float", "base64"]
_TEXT = TEXT_OPTION_DECLARATIONS

# The input's shapes beside a string, by tag.
_SHAPES = {
    "texts": "an array of strings",
    "ids": "an array of token ids",
    "rows": "an array of token-id arrays",
}
_TEXTS = Annotated[
    list[NON_EMPTY_TEXT],
    Field(min_length=1, max_length=MAX_INPUTS),
    Tag("texts"),
    Phrase(_SHAPES["texts"]),
]
# One text's token ids: the model's own bound on them is its max length.
_TOKEN_IDS = Annotated[list[int], Field(min_length=1), Tag("ids"), Phrase(_SHAPES["ids"])]
_TOKEN_ROW = Annotated[list[int], Field(min_length=1, title="token array")]
_TOKEN_ROWS = Annotated[
    list[_TOKEN_ROW],
    Field(min_length=1, max_length=MAX_INPUTS),
    Tag("rows"),
    Phrase(_SHAPES["rows"]),
]


def _shape(value: object) -> str | None:
    """Which of the input's shapes a value is, told by its first item."""
    if not isinstance(value, list):
        return None
    first = value[0] if value else ""
    if isinstance(first, str):
        return "texts"
    if isinstance(first, list):
        return "rows"
    # bool is an int in Python; JSON's booleans are no token ids.
    return "ids" if isinstance(first, int) and not isinstance(first, bool) else None


_INPUT_PHRASE = listed(["a string", *_SHAPES.values()])
EmbeddingsInput = one_text_or_many(
    Annotated[
        _TEXTS | _TOKEN_IDS | _TOKEN_ROWS,
        Discriminator(_shape, custom_error_type="input_shape", custom_error_message=_INPUT_PHRASE),
        Phrase(_INPUT_PHRASE, whole=True),
    ]
)


EncodingFormats = choices(get_args(EncodingFormat))
# The options' types, from the service's declaration.
Dimensions = option_type(ROW_OPTIONS["dimensions"])
PromptName = option_type(_TEXT["prompt_name"])
InputType = option_type(_TEXT["input_type"])
Truncate = option_type(_TEXT["truncate"])
TruncationDirection = option_type(_TEXT["truncation_direction"])


class EmbeddingsRequest(BaseModel):
    """POST /v1/embeddings."""

    model_config = STRICT
    model: str
    input: EmbeddingsInput
    encoding_format: EncodingFormats = "float"
    dimensions: Dimensions = None
    user: str | None = None
    prompt_name: PromptName = None
    input_type: InputType = None
    truncate: Truncate = None
    truncation_direction: TruncationDirection = None


class EmbeddingObject(TypedDict):
    object: Literal["embedding"]
    index: int
    # encoding_format float: the floats; base64: their float32 little-endian bytes.
    embedding: list[float] | str


class Usage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(TypedDict):
    object: Literal["list"]
    data: list[EmbeddingObject]
    model: str
    usage: Usage


class ModelObject(TypedDict):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(TypedDict):
    object: Literal["list"]
    data: list[ModelObject]


@dataclass(frozen=True)
class TokenLimits:
    max_length: int
    vocab_size: int


@dataclass(frozen=True)
class EmbeddingsCall:
    """What an embeddings request asks for: exactly one of texts and
    token_rows is non-empty; text_options only with texts."""

    model: str
    texts: list[str]
    token_rows: list[list[int]]
    encoding_format: EncodingFormat
    dimensions: int | None
    text_options: TextKwargs


def parse_embeddings_request(
    body: bytes, limits: Mapping[str, TokenLimits], served: ServedModels
) -> EmbeddingsCall:
    """limits: those of each embedding model this gateway serves token ids to, by name."""
    request = parse(EmbeddingsRequest, body, OPENAI_WORDS)
    model = served.embedding_model(request.model)
    options = TextKwargs()
    for name in _TEXT:
        if getattr(request, name) is not None:
            options[name] = getattr(request, name)  # type: ignore[literal-required]
    texts, rows = _texts_or_rows(request.input, model, limits.get(model))
    if rows and options:
        field = next(iter(options))
        raise bad_request(
            f"'{field}' applies to text input only: token ids go to the model as given, "
            "without a prompt or truncation",
            field,
        )
    return EmbeddingsCall(model, texts, rows, request.encoding_format, request.dimensions, options)


def _texts_or_rows(
    value: list[Any], model: str, limits: TokenLimits | None
) -> tuple[list[str], list[list[int]]]:
    """The input's texts, or its token rows checked against the model's limits (None: a model
    that takes texts only, having no token ids entry point)."""
    shape = _shape(value)
    if shape == "texts":
        return value, []
    if limits is None:
        raise bad_request(
            f"The model '{model}' takes texts only: it has no token ids entry point", "input"
        )
    if shape == "ids":
        _check_row(value, "input", limits)
        return [], [value]
    for index, row in enumerate(value):
        _check_row(row, f"input[{index}]", limits)
    return [], value


def _check_row(row: list[int], where: str, limits: TokenLimits) -> None:
    """A token row against the model's own limits, which its tokenizer.json gives."""
    if len(row) > limits.max_length:
        raise bad_request(
            f"'{where}' has {len(row)} tokens; the model takes at most {limits.max_length}",
            "input",
            "context_length_exceeded",
        )
    for token in row:
        if not 0 <= token < limits.vocab_size:
            raise bad_request(
                f"'{where}' holds {token!r}, not a token id in 0..{limits.vocab_size - 1}", "input"
            )


def render_embeddings(
    vectors: np.ndarray, encoding_format: EncodingFormat, model: str, prompt_tokens: int
) -> bytes:
    """vectors: float32 [N, k], little-endian as Triton sent them; orjson
    writes each float row as its list of floats."""
    if encoding_format == "base64":
        embeddings: Sequence[Any] = [base64.b64encode(row).decode("ascii") for row in vectors]
    else:
        embeddings = list(vectors)
    response = EmbeddingsResponse(
        object="list",
        data=[
            EmbeddingObject(object="embedding", index=index, embedding=cast(Any, embedding))
            for index, embedding in enumerate(embeddings)
        ],
        model=model,
        usage=Usage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens),
    )
    return orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)


def model_object(model: str, created: int, owned_by: str) -> ModelObject:
    return ModelObject(id=model, object="model", created=created, owned_by=owned_by)


def render_models(models: list[ModelObject]) -> bytes:
    return orjson.dumps(ModelList(object="list", data=models))
