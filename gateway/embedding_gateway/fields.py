"""What every API's schema is made of: the service's request options as
field types, from the one declaration the client and the stages read
(embedding_client.options), and the words an error message says a field
must be (Phrase), kept beside each field's type.

Every schema is strict (no string is taken for a number, no number for a
boolean) and refuses fields it does not declare."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from embedding_client.options import PYTHON_TYPES, Option, listed
from pydantic import BeforeValidator, ConfigDict, Field

STRICT = ConfigDict(extra="forbid", strict=True)


@dataclass(frozen=True)
class Phrase:
    """What a value must be, as a refusal says it ("a positive integer").
    whole: a mistake anywhere in the value is the whole field's, named
    with this phrase (for a field of several shapes, where an item that
    fits none cannot tell which one was meant)."""

    text: str
    whole: bool = False


def choices(values: Sequence[str]) -> Any:
    """A string of these values."""
    return Annotated[Literal[tuple(values)], Phrase(listed([f"'{v}'" for v in values]))]


def option_type(option: Option, spelled: Callable[[str], str] = str) -> Any:
    """The field type of a declared option, None allowed (the server's
    default); `spelled`: how the API spells each choice."""
    if option.choices:
        return choices([spelled(choice) for choice in option.choices]) | None
    kind = PYTHON_TYPES[option.type]
    bounds = Field(ge=option.minimum, le=option.maximum)
    return Annotated[kind, bounds, Phrase(option.describe())] | None


def _one_text_is_a_list(value: object) -> object:
    return [value] if isinstance(value, str) else value


def one_text_or_many(texts: Any) -> Any:
    """A string or `texts`, a list: a string is a list of one, as the APIs
    take it, so that an item's refusal names its index either way."""
    return Annotated[
        texts,
        BeforeValidator(_one_text_is_a_list, json_schema_input_type=NON_EMPTY_TEXT | texts),
    ]


NON_EMPTY_TEXT = Annotated[str, Field(min_length=1), Phrase("a non-empty string")]
