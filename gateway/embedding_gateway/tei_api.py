"""TEI's routes, so that clients written for text-embeddings-inference
(LangChain's and LlamaIndex's TEI embeddings and reranker,
huggingface_hub's InferenceClient.feature_extraction) work unchanged:
`/embed` and `/` (inputs -> a list of float lists), `/embed_sparse`
(inputs -> a list of {index, value} per input) and `/rerank` (query, texts
-> a list of index and score). The request and response bodies are
declared once here, from which requests are validated, refusals worded
(refusals.py) and the OpenAPI document written (openapi.py).

TEI serves one model, so its routes name none; here an optional `model`
field names one, and without it the gateway's only model of that task
serves. Where TEI's own defaults differ from the model's, the model's hold:
an absent `truncate` leaves the model's own (cut at its max length), where
TEI refuses an over-long input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, NotRequired

import numpy as np
import orjson
from embedding_catalog.tasks import EMBED, RERANK
from embedding_client.options import (
    ROW_OPTIONS,
    TEXT_OPTION_DECLARATIONS,
    TRUNCATION_DIRECTIONS,
    TextKwargs,
)
from embedding_client.rerank import Ranked
from embedding_client.sparse import SparseRow
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from embedding_gateway.fields import NON_EMPTY_TEXT, STRICT, Phrase, one_text_or_many, option_type
from embedding_gateway.openai_api import MAX_INPUTS
from embedding_gateway.refusals import PLAIN_WORDS, parse
from embedding_gateway.reranking import RerankCall, RerankRequest, document_list
from embedding_gateway.served_models import ServedModels

_TEXT = TEXT_OPTION_DECLARATIONS


def _tei_spelling(direction: str) -> str:
    """TEI spells the truncation directions capitalized."""
    return direction.capitalize()


_DIRECTIONS = {_tei_spelling(direction): direction for direction in TRUNCATION_DIRECTIONS}
Inputs = one_text_or_many(
    Annotated[
        list[NON_EMPTY_TEXT],
        Field(min_length=1, max_length=MAX_INPUTS),
        Phrase("a string or a non-empty array of strings"),
    ]
)
Truncate = option_type(_TEXT["truncate"])
TruncationDirection = option_type(_TEXT["truncation_direction"], _tei_spelling)
PromptName = option_type(_TEXT["prompt_name"])
Dimensions = option_type(ROW_OPTIONS["dimensions"])


class TeiSparseRequest(BaseModel):
    """POST /embed_sparse."""

    model_config = STRICT
    model: str | None = None
    inputs: Inputs
    truncate: Truncate = None
    truncation_direction: TruncationDirection = None
    prompt_name: PromptName = None


class TeiEmbedRequest(TeiSparseRequest):
    """POST /embed and POST / (huggingface_hub's feature_extraction)."""

    normalize: bool = True
    dimensions: Dimensions = None


# A pair's longer text is cut first, from its end: no other direction.
PairTruncation = Annotated[
    Literal["Right"], Phrase("'Right': a pair's longer text is cut first, from its end")
]
TeiTexts = document_list(str)
RawScores = Annotated[
    Literal[False], Phrase("false: not supported, scores come with the model's activation")
]


class TeiRerankRequest(RerankRequest):
    """POST /rerank."""

    texts: TeiTexts
    truncate: Truncate = None
    raw_scores: RawScores = False
    return_text: bool = False
    truncation_direction: PairTruncation | None = None


# /embed: a list of floats per input.
TeiEmbeddings = list[list[float]]


class SparseValue(TypedDict):
    index: int
    value: float


# /embed_sparse: the active entries of each input.
TeiSparseEmbeddings = list[list[SparseValue]]


class TeiRank(TypedDict):
    index: int
    score: float
    text: NotRequired[str]


TeiRanks = list[TeiRank]


@dataclass(frozen=True)
class TeiCall:
    model: str
    texts: list[str]
    text_options: TextKwargs
    normalize: bool
    dimensions: int | None


def parse_tei_embed(body: bytes, task: str, served: ServedModels) -> TeiCall:
    """task: the route's, embed or sparse."""
    schema = TeiEmbedRequest if task == EMBED.name else TeiSparseRequest
    request = parse(schema, body, PLAIN_WORDS)
    model = served.pick(request.model, task)
    options = TextKwargs()
    if request.truncate is not None:
        options["truncate"] = request.truncate
    if request.truncation_direction is not None:
        options["truncation_direction"] = _DIRECTIONS[request.truncation_direction]
    if request.prompt_name is not None:
        options["prompt_name"] = request.prompt_name
    if isinstance(request, TeiEmbedRequest):
        return TeiCall(model, request.inputs, options, request.normalize, request.dimensions)
    return TeiCall(model, request.inputs, options, True, None)


def parse_tei_rerank(body: bytes, served: ServedModels) -> RerankCall:
    request = parse(TeiRerankRequest, body, PLAIN_WORDS)
    model = served.pick(request.model, RERANK.name)
    return RerankCall(
        model, request.query, request.texts, None, request.return_text, request.truncate
    )


def render_dense(vectors: np.ndarray) -> bytes:
    """float32 [N, k] -> TEI's list of float lists."""
    return orjson.dumps(vectors, option=orjson.OPT_SERIALIZE_NUMPY)


def render_sparse(rows: Sequence[SparseRow]) -> bytes:
    """TEI's list of {index, value} per input. Each value stays a numpy
    scalar, so it is written in its own dtype's shortest digits, as TEI writes
    them, not in those of the double it would widen to (about 25% longer)."""
    embeddings: TeiSparseEmbeddings = [
        [
            SparseValue(index=index, value=value)
            for index, value in zip(row.indices.tolist(), row.values, strict=True)
        ]
        for row in rows
    ]
    return orjson.dumps(embeddings, option=orjson.OPT_SERIALIZE_NUMPY)


def render_ranks(ranked: list[Ranked], call: RerankCall) -> bytes:
    ranks: TeiRanks = []
    for each in ranked:
        rank = TeiRank(index=each.index, score=each.relevance_score)
        if call.return_documents:
            rank["text"] = call.documents[each.index]
        ranks.append(rank)
    return orjson.dumps(ranks)
