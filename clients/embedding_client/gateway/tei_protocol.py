"""TEI's embedding routes, so that clients written for text-embeddings-
inference (LangChain's and LlamaIndex's TEI embeddings, huggingface_hub's
InferenceClient.feature_extraction) work unchanged: `/embed` (inputs ->
a list of float lists) and `/embed_sparse` (inputs -> a list of
{index, value} per input). TEI serves one model, so its routes name none;
here an optional `model` field names one, and without it the gateway's
only model of that task serves.

Where TEI's own defaults differ from the model's, the model's hold: an
absent `truncate` leaves the model's own (cut at its max length), where TEI
refuses an over-long input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from embedding_client.gateway.errors import bad_request
from embedding_client.gateway.protocol import MAX_INPUTS, json_object, pick_model
from embedding_client.options import TextKwargs
from embedding_client.sparse import SparseRow

# TEI's fields, by route; `model` is this gateway's.
_TEXT_FIELDS = frozenset({"model", "inputs", "truncate", "truncation_direction", "prompt_name"})
FIELDS = {
    "embed": _TEXT_FIELDS | {"normalize", "dimensions"},
    "sparse": _TEXT_FIELDS,
}
# The kind of model each route serves, for messages.
KINDS = {"embed": "embedding model", "sparse": "sparse encoder"}
# TEI spells the directions capitalized.
_DIRECTIONS = {"Right": "right", "Left": "left"}


@dataclass(frozen=True)
class TeiRequest:
    model: str
    texts: list[str]
    text_options: TextKwargs
    normalize: bool
    dimensions: int | None


def parse_tei_request(
    body: bytes, task: str, names: Sequence[str], tasks: Mapping[str, str]
) -> TeiRequest:
    """task: "embed" or "sparse", the route's; names: the gateway's models of
    that task; tasks: every model it serves, by name."""
    payload = json_object(body)
    unknown = sorted(payload.keys() - FIELDS[task])
    if unknown:
        raise bad_request(
            f"Unrecognized request argument supplied: {unknown[0]}", unknown[0], "unknown_parameter"
        )
    model = pick_model(payload.get("model"), names, tasks, KINDS[task])
    return TeiRequest(
        model,
        _inputs(payload.get("inputs")),
        _text_options(payload),
        _boolean(payload, "normalize", True),
        _dimensions(payload.get("dimensions")),
    )


def _inputs(value: object) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise bad_request(
            "'inputs' is required: a string or a non-empty array of strings", "inputs"
        )
    if len(items) > MAX_INPUTS:
        raise bad_request(
            f"'inputs' has {len(items)} items; at most {MAX_INPUTS} are allowed", "inputs"
        )
    for index, text in enumerate(items):
        if not isinstance(text, str) or not text:
            raise bad_request(f"'inputs[{index}]' must be a non-empty string", "inputs")
    return items


def _text_options(payload: dict[str, Any]) -> TextKwargs:
    options = TextKwargs()
    if payload.get("truncate") is not None:
        options["truncate"] = _boolean(payload, "truncate", False)
    direction = payload.get("truncation_direction")
    if direction is not None:
        if direction not in _DIRECTIONS:
            raise bad_request(
                f"'truncation_direction' must be 'Right' or 'Left', got {direction!r}",
                "truncation_direction",
            )
        options["truncation_direction"] = "left" if direction == "Left" else "right"
    prompt_name = payload.get("prompt_name")
    if prompt_name is not None:
        if not isinstance(prompt_name, str):
            raise bad_request(f"'prompt_name' must be a string, got {prompt_name!r}", "prompt_name")
        options["prompt_name"] = prompt_name
    return options


def _boolean(payload: dict[str, Any], field: str, default: bool) -> bool:
    value = payload.get(field)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{field}' must be a boolean, got {value!r}", field)
    return value


def _dimensions(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_request(f"'dimensions' must be a positive integer, got {value!r}", "dimensions")
    return value


def render_dense(vectors: np.ndarray) -> bytes:
    """float32 [N, k] -> TEI's list of float lists."""
    return orjson.dumps(vectors, option=orjson.OPT_SERIALIZE_NUMPY)


def render_sparse(rows: Sequence[SparseRow]) -> bytes:
    """TEI's list of {index, value} per input. Each value stays a numpy
    scalar, so it is written in its own dtype's shortest digits, as TEI writes
    them, not in those of the double it would widen to (about 25% longer)."""
    return orjson.dumps(
        [
            [
                {"index": index, "value": value}
                for index, value in zip(row.indices.tolist(), row.values, strict=True)
            ]
            for row in rows
        ],
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
