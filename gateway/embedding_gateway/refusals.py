"""A request body parsed with its API's schema, or refused with a 400 whose
message names the field and says what it must be, in the words the schema
declares beside the field (fields.Phrase) and in the API's own idiom
(Words). The first mistake is named, in the schema's order of fields."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from embedding_client.options import PYTHON_TYPES
from pydantic import BaseModel, Tag, ValidationError
from pydantic.fields import FieldInfo

from embedding_gateway.errors import ApiError, bad_request
from embedding_gateway.fields import Phrase

SchemaT = TypeVar("SchemaT", bound=BaseModel)
# Long values are not echoed whole: a refusal names the field and the kind.
_ECHOED_CHARS = 80
_TYPE_WORDS = {kind: words for words, kind in PYTHON_TYPES.items()}
_EMPTY = frozenset({"too_short", "string_too_short"})


@dataclass(frozen=True)
class Words:
    """An API's idiom for a refusal: {path} is the field or the item
    ('input[3]'), {phrase} what it must be, {noun} what is empty."""

    missing: str
    empty_field: str
    empty_item: str
    wrong: str = "'{path}' must be {phrase}{got}"
    too_many: str = "'{path}' has {count} items; at most {limit} are allowed"
    too_large: str = "'{path}' must be at most {limit}{got}"


OPENAI_WORDS = Words(
    missing="'{path}' is required",
    empty_field="'{path}' is an empty {noun}",
    empty_item="'{path}' is an empty {noun}",
)
# Cohere's and TEI's: an empty field is a missing one.
PLAIN_WORDS = Words(
    missing="'{path}' is required: {phrase}",
    empty_field="'{path}' is required: {phrase}",
    empty_item="'{path}' must be {phrase}",
)


def parse(schema: type[SchemaT], body: bytes, words: Words) -> SchemaT:
    try:
        return schema.model_validate_json(body)
    except ValidationError as error:
        raise refusal(schema, error.errors(include_url=False)[0], words) from None


def refusal(schema: type[BaseModel], error: Any, words: Words) -> ApiError:
    kind, location = error["type"], error["loc"]
    if kind == "json_invalid":
        detail = error["ctx"]["error"]
        return bad_request(f"The request body is not valid JSON: {detail}", None, "invalid_json")
    if not location:
        return bad_request("The request body must be a JSON object", None, "invalid_json")
    field = str(location[0])
    if kind == "extra_forbidden":
        return bad_request(
            f"Unrecognized request argument supplied: {field}", field, "unknown_parameter"
        )
    steps = _steps(schema.model_fields[field], location[1:])
    path = field + steps[-1][0]
    if kind == "missing":
        message = words.missing.format(path=field, phrase=_nearest(steps))
        return bad_request(message, field, "missing_required_parameter")
    if kind in _EMPTY:
        noun = "string" if kind == "string_too_short" else _noun(steps[-1][1])
        template = words.empty_item if steps[-1][0] else words.empty_field
        return bad_request(template.format(path=path, phrase=_nearest(steps), noun=noun), field)
    if kind == "too_long":
        context = error["ctx"]
        message = words.too_many.format(
            path=path, count=context["actual_length"], limit=context["max_length"]
        )
        return bad_request(message, field)
    if kind == "less_than_equal":
        message = words.too_large.format(path=path, limit=error["ctx"]["le"], got=_got(error))
        return bad_request(message, field)
    whole = _marker(steps[0][1])
    if whole is not None and whole.whole:
        return bad_request(words.wrong.format(path=field, phrase=whole.text, got=""), field)
    return bad_request(
        words.wrong.format(path=path, phrase=_nearest(steps), got=_got(error)), field
    )


# A step into a field's value: the path so far and the type there.
Step = tuple[str, Any]


def _steps(field: FieldInfo, rest: tuple[int | str, ...]) -> list[Step]:
    """The field's type, then the type at each step of an error's location
    into it (an index into a list, a union's tag)."""
    path = ""
    annotation = (
        Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
    )
    steps = [(path, annotation)]
    for step in rest:
        if isinstance(step, int):
            path += f"[{step}]"
            items = get_args(_bare(annotation))
            annotation = items[0] if items else Any
        else:
            annotation = _member(annotation, step)
        steps.append((path, annotation))
    return steps


def _nearest(steps: list[Step]) -> str:
    """What the value at the last step must be: the nearest phrase above it,
    else what its type says."""
    for _, annotation in reversed(steps):
        marker = _marker(annotation)
        if marker is not None:
            return marker.text
    return _derived(steps[-1][1])


def _metadata(annotation: Any) -> tuple[Any, ...]:
    return get_args(annotation)[1:] if get_origin(annotation) is Annotated else ()


def _marker(annotation: Any) -> Phrase | None:
    """The Phrase of a type, or of the one type beside None in an optional one."""
    for each in (annotation, _optional(annotation)):
        found = [item for item in _metadata(each) if isinstance(item, Phrase)]
        if found:
            return found[0]
    return None


def _optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        members = [m for m in get_args(annotation) if m is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def _bare(annotation: Any) -> Any:
    """The type under its Annotated metadata and beside None."""
    annotation = _optional(annotation)
    while get_origin(annotation) is Annotated:
        annotation = _optional(get_args(annotation)[0])
    return annotation


def _member(annotation: Any, tag: str) -> Any:
    """The member of a tagged union that `tag` names."""
    for member in get_args(_bare(annotation)):
        if Tag(tag) in _metadata(member):
            return member
    return Any


def _noun(annotation: Any) -> str:
    """What an empty value is: its type's title, else an array."""
    titles = [item.title for item in _metadata(annotation) if isinstance(item, FieldInfo)]
    return next((title for title in titles if title), "array")


def _derived(annotation: Any) -> str:
    """What a value must be, where no phrase says it: a choice, or its type."""
    bare = _bare(annotation)
    if get_origin(bare) is Literal:
        return " or ".join(f"'{value}'" for value in get_args(bare))
    return _TYPE_WORDS.get(bare, "an array" if get_origin(bare) is list else "an object")


def _got(error: Any) -> str:
    """', got <value>' for a scalar value, briefly; nothing for an array or object."""
    value = error.get("input")
    if isinstance(value, list | dict):
        return ""
    shown = repr(value)
    return f", got {shown[:_ECHOED_CHARS]}{'...' if len(shown) > _ECHOED_CHARS else ''}"
