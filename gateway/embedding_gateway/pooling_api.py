"""vLLM's pooling route, for a multi-vector encoder's token vectors: `/pooling` with
`"task": "token_embed"` (inputs -> each input's vectors, a list of float lists), as vLLM's
OpenAI-compatible server answers it, so that a client written for vLLM's token embeddings works
unchanged. The request and response bodies are declared once here, from which requests are
validated, refusals worded (refusals.py) and the OpenAPI document written (openapi.py).

Beyond vLLM: `input_type` is the role the inputs are encoded in (query or document, the
default), `pool_factor` a document request's token pooling (embedding_client's
MultiVectorOptions), `dtype` the vectors' format, and a request that accepts `application/octet-stream`
gets the vectors as raw little-endian bytes instead of nested float lists (docs/clients.md,
"Token vectors over HTTP"): per input, a uint32 count n, then its n vectors in the dtype, the inputs one
after another; the headers name the dtype and the vectors' dimensions. Errors are OpenAI's.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
import orjson
from embedding_catalog.tasks import MULTIVECTOR
from embedding_client.decode import OPTION_DEFAULTS, ROW_DTYPES
from embedding_client.multivector_decode import BIT_PACKED
from embedding_client.options import INPUT_TYPES, MULTIVECTOR_KIND, POOLING_OPTIONS, TextKwargs
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from embedding_gateway.fields import (
    NON_EMPTY_TEXT,
    STRICT,
    Phrase,
    choices,
    one_text_or_many,
    option_type,
)
from embedding_gateway.openai_api import MAX_INPUTS
from embedding_gateway.refusals import OPENAI_WORDS, parse
from embedding_gateway.served_models import ServedModels

# What a raw answer is sent as, and the headers that say how to read it.
OCTET_STREAM = "application/octet-stream"
DTYPE_HEADER = "X-Vector-Dtype"
DIMENSIONS_HEADER = "X-Vector-Dimensions"
# The count before each input's vectors (row_formats.json's multivector count: uint32).
_COUNT = struct.Struct("<I")
# The one pooling task served: vLLM's token embeddings.
TOKEN_EMBED = "token_embed"

Inputs = one_text_or_many(
    Annotated[
        list[NON_EMPTY_TEXT],
        Field(min_length=1, max_length=MAX_INPUTS),
        Phrase("a string or a non-empty array of strings"),
    ]
)
PoolingTask = Annotated[
    Literal["token_embed"], Phrase("'token_embed': this route answers token vectors")
]


class PoolingRequest(BaseModel):
    """POST /pooling."""

    model_config = STRICT
    model: str | None = None
    input: Inputs
    task: PoolingTask = TOKEN_EMBED
    encoding_format: Literal["float"] = "float"
    input_type: choices(INPUT_TYPES) | None = None  # type: ignore[valid-type]
    dtype: choices(list(ROW_DTYPES)) = OPTION_DEFAULTS["dtype"]  # type: ignore[valid-type]
    pool_factor: option_type(POOLING_OPTIONS["pool_factor"]) = None  # type: ignore[valid-type]
    truncate: bool | None = None


class PoolingData(TypedDict):
    index: int
    object: Literal["pooling"]
    data: list[list[float]]


class PoolingResponse(TypedDict):
    id: str
    object: Literal["list"]
    created: int
    model: str
    data: list[PoolingData]


@dataclass(frozen=True)
class PoolingCall:
    model: str
    texts: list[str]
    kind: str
    dtype: str
    pool_factor: float | None
    text_options: TextKwargs


def parse_pooling(body: bytes, served: ServedModels) -> PoolingCall:
    request = parse(PoolingRequest, body, OPENAI_WORDS)
    model = served.pick(request.model, MULTIVECTOR.name)
    options = TextKwargs()
    if request.truncate is not None:
        options["truncate"] = request.truncate
    kind = request.input_type or MULTIVECTOR_KIND
    return PoolingCall(model, request.input, kind, request.dtype, request.pool_factor, options)


def render_pooling(vectors: Sequence[np.ndarray], model: str) -> bytes:
    """vLLM's answer: each input's vectors as float lists, in its dtype's shortest digits."""
    response = PoolingResponse(
        id=f"pool-{uuid.uuid4().hex}",
        object="list",
        created=int(time.time()),
        model=model,
        data=[
            PoolingData(index=index, object="pooling", data=each)  # type: ignore[typeddict-item]
            for index, each in enumerate(vectors)
        ],
    )
    return orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)


def render_raw(vectors: Sequence[np.ndarray], dtype: str) -> tuple[bytes, dict[str, str]]:
    """The raw answer and its headers: per input its count, then its vectors' bytes."""
    parts = []
    for each in vectors:
        parts.append(_COUNT.pack(len(each)))
        parts.append(np.ascontiguousarray(each).tobytes())
    dims = next((_dims(each, dtype) for each in vectors if len(each)), 0)
    return b"".join(parts), {DTYPE_HEADER: dtype, DIMENSIONS_HEADER: str(dims)}


def _dims(vectors: np.ndarray, dtype: str) -> int:
    """A vector's dimensions: its values, or 8 per packed byte."""
    return int(vectors.shape[1]) * (8 if dtype in BIT_PACKED else 1)
