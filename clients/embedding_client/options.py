"""The request parameters of the embedding ensembles, checked before sending."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

from embedding_client.decode import (
    OPTION_DEFAULTS,
    ROW_DTYPES,
    SPARSE_OPTION_DEFAULTS,
    SPARSE_VALUE_DTYPES,
)
from embedding_client.errors import InvalidInputError

Parameters = dict[str, str | int | bool]
InputType = Literal["query", "document"]
TruncationDirection = Literal["right", "left"]
INPUT_TYPES: tuple[InputType, ...] = ("query", "document")
TRUNCATION_DIRECTIONS: tuple[TruncationDirection, ...] = ("right", "left")
# The options that choose how texts become tokens: the text entry point's
# tokenizer applies them, so they cannot go with token ids.
TEXT_OPTIONS = ("prompt_name", "input_type", "truncate", "truncation_direction")


class TextKwargs(TypedDict, total=False):
    """The keyword options of every method that takes texts."""

    prompt_name: str | None
    input_type: InputType | None
    truncate: bool | None
    truncation_direction: TruncationDirection | None


class EmbedKwargs(TextKwargs, total=False):
    """The keyword options of every embed method."""

    dtype: str
    dimensions: int | None
    normalize: bool


class SparseKwargs(TextKwargs, total=False):
    """The keyword options of embed_sparse."""

    dtype: str
    max_active_dims: int | None


def _invalid(parameter: str, detail: str) -> InvalidInputError:
    """Worded like the server's errors, so `kind` and `parameter` read alike."""
    return InvalidInputError(f"invalid_parameter '{parameter}': {detail}")


@dataclass(frozen=True)
class TextOptions:
    """How texts become tokens, for every entry point that takes texts. None
    leaves an option to the server: its default, or the model's (a model may
    default to a prompt, or to refusing over-long texts)."""

    prompt_name: str | None = None
    input_type: str | None = None
    truncate: bool | None = None
    truncation_direction: str | None = None

    def __post_init__(self) -> None:
        # Which prompt names exist is the server's to say, per model.
        if self.prompt_name is not None and not isinstance(self.prompt_name, str):
            raise _invalid("prompt_name", f"must be a string, got {self.prompt_name!r}")
        _check_choice("input_type", self.input_type, INPUT_TYPES)
        if self.truncate is not None and not isinstance(self.truncate, bool):
            raise _invalid("truncate", f"must be a boolean, got {self.truncate!r}")
        _check_choice("truncation_direction", self.truncation_direction, TRUNCATION_DIRECTIONS)

    @property
    def text_options(self) -> tuple[str, ...]:
        """The text-only options this call sets (TEXT_OPTIONS)."""
        return tuple(name for name in TEXT_OPTIONS if getattr(self, name) is not None)

    def _text_parameters(self) -> Parameters:
        return {name: getattr(self, name) for name in self.text_options}


@dataclass(frozen=True)
class EmbedOptions(TextOptions):
    """The options of embedding rows, and of texts."""

    dtype: str = OPTION_DEFAULTS["dtype"]
    dimensions: int | None = None
    normalize: bool = OPTION_DEFAULTS["normalize"]

    def __post_init__(self) -> None:
        if self.dtype not in ROW_DTYPES:
            raise _invalid(
                "dtype", f"unknown dtype {self.dtype!r}; expected one of {', '.join(ROW_DTYPES)}"
            )
        if self.dimensions is not None and (
            isinstance(self.dimensions, bool) or not isinstance(self.dimensions, int)
        ):
            raise _invalid("dimensions", f"must be an integer, got {self.dimensions!r}")
        if not isinstance(self.normalize, bool):
            raise _invalid("normalize", f"must be a boolean, got {self.normalize!r}")
        super().__post_init__()

    def parameters(self) -> Parameters:
        """dtype always travels, since decoding depends on it; the others only
        when they differ from the server's defaults or are set. The server
        checks ranges and prompt names."""
        parameters: Parameters = {"dtype": self.dtype}
        if self.dimensions is not None:
            parameters["dimensions"] = self.dimensions
        if self.normalize != OPTION_DEFAULTS["normalize"]:
            parameters["normalize"] = self.normalize
        return parameters | self._text_parameters()


@dataclass(frozen=True)
class SparseOptions(TextOptions):
    """The options of sparse rows, and of texts."""

    dtype: str = SPARSE_OPTION_DEFAULTS["dtype"]
    max_active_dims: int | None = None

    def __post_init__(self) -> None:
        if self.dtype not in SPARSE_VALUE_DTYPES:
            raise _invalid(
                "dtype",
                f"unknown dtype {self.dtype!r} for sparse rows; expected one of "
                f"{', '.join(SPARSE_VALUE_DTYPES)}",
            )
        if self.max_active_dims is not None and (
            isinstance(self.max_active_dims, bool)
            or not isinstance(self.max_active_dims, int)
            or self.max_active_dims < 1
        ):
            raise _invalid(
                "max_active_dims", f"must be a positive integer, got {self.max_active_dims!r}"
            )
        super().__post_init__()

    def parameters(self) -> Parameters:
        """dtype always travels, since decoding depends on it."""
        parameters: Parameters = {"dtype": self.dtype}
        if self.max_active_dims is not None:
            parameters["max_active_dims"] = self.max_active_dims
        return parameters | self._text_parameters()


def _check_choice(parameter: str, value: object, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        raise _invalid(parameter, f"must be one of {', '.join(choices)}, got {value!r}")
