"""The request parameters of the service's entry points, each declared once in
the service's declaration (declaration.py: its type, default, minimum or
choices) and checked here once, before sending."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from embedding_client.declaration import DECLARATION
from embedding_client.decode import (
    OPTION_DEFAULTS,
    ROW_DTYPES,
    SPARSE_OPTION_DEFAULTS,
    SPARSE_VALUE_DTYPES,
)
from embedding_client.errors import InvalidInputError

Parameters = dict[str, str | int | float | bool]
# A declared type, in the words messages use, and the Python type of its values.
INTEGER = "an integer"
NUMBER = "a number"
PYTHON_TYPES: dict[str, type] = {"a string": str, INTEGER: int, "a boolean": bool, NUMBER: float}
INTEGER_MAXIMUM: int = DECLARATION["integer_maximum"]


def listed(phrases: Sequence[str], last: str = "or") -> str:
    """Phrases as "a, b or c"."""
    if len(phrases) == 1:
        return phrases[0]
    return f"{', '.join(phrases[:-1])} {last} {phrases[-1]}"


@dataclass(frozen=True)
class Option:
    """One request option as the declaration has it; choices: the values a
    string may take (none: any)."""

    name: str
    type: str
    default: Any = None
    minimum: int | None = None
    choices: tuple[str, ...] = ()
    # An integer's own bound, where the declaration gives one (muvera_k_sim).
    declared_maximum: int | None = None

    @classmethod
    def declared(cls, entry: Mapping[str, Any]) -> Option:
        # An input_type choice maps to its prompts: its keys are the choices.
        choices = tuple(entry.get("choices", ()))
        return cls(
            entry["name"],
            entry["type"],
            entry["default"],
            entry.get("minimum"),
            choices,
            entry.get("maximum"),
        )

    @property
    def maximum(self) -> int | None:
        """An integer's largest value: its declared one, else int64's, as Triton's request
        parameters carry it."""
        if self.type != INTEGER:
            return None
        return INTEGER_MAXIMUM if self.declared_maximum is None else self.declared_maximum

    def describe(self) -> str:
        """What a value must be, as a message says it."""
        if self.choices:
            return listed([f"'{choice}'" for choice in self.choices])
        if self.minimum == 1 and self.type == INTEGER:
            return "a positive integer"
        if self.minimum is not None:
            return f"{self.type} of at least {self.minimum}"
        return self.type

    def problem(self, value: object) -> str | None:
        """Why `value` cannot be this option's, or None where it can (None
        itself leaves the option to the server)."""
        if value is None:
            return None
        # A number may be written as an integer.
        kind = (int, float) if self.type == NUMBER else PYTHON_TYPES[self.type]
        # bool is an int in Python; the service's integers are not booleans.
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            return f"must be {self.type}, got {value!r}"
        if self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}, got {value!r}"
        if self.minimum is not None and value < self.minimum:  # type: ignore[operator]
            return f"must be {self.describe()}, got {value!r}"
        if self.maximum is not None and value > self.maximum:  # type: ignore[operator]
            return f"must be at most {self.maximum}, got {value!r}"
        return None


def _declared(entries: list[dict[str, Any]]) -> dict[str, Option]:
    return {entry["name"]: Option.declared(entry) for entry in entries}


# dtype's values are the row formats: decode.py's ROW_DTYPES and SPARSE_VALUE_DTYPES.
# Multi-vector rows take the dense dtypes, and no other row option.
ROW_OPTIONS = _declared(DECLARATION["options"])
SPARSE_ROW_OPTIONS = _declared(DECLARATION["sparse"]["options"])
TEXT_OPTION_DECLARATIONS = _declared(DECLARATION["text_options"])
RERANK_OPTIONS = _declared(DECLARATION["rerank_options"])
# Applied before a multi-vector row is made: a document request's token pooling.
POOLING_OPTIONS = _declared(DECLARATION["multivector"]["pooling_options"])
INPUT_TYPES = TEXT_OPTION_DECLARATIONS["input_type"].choices
TRUNCATION_DIRECTIONS = TEXT_OPTION_DECLARATIONS["truncation_direction"].choices
# A multi-vector encoder's MUVERA encoding (NAME_muvera): its parameters, named as the request
# carries them (muvera_k_sim, ...), and the most values an encoding may hold.
MUVERA_OPTIONS = _declared(DECLARATION["multivector"]["muvera_options"])
MUVERA_MAX_WIDTH: int = DECLARATION["multivector"]["muvera_max_width"]
# The role a multi-vector encoder's texts are encoded in where a call names none.
MULTIVECTOR_KIND: str = DECLARATION["multivector"]["default_input_type"]
# The options that choose how texts become tokens: the text entry point's
# tokenizer applies them, so they cannot go with token ids.
TEXT_OPTIONS = tuple(TEXT_OPTION_DECLARATIONS)


class TextKwargs(TypedDict, total=False):
    """The keyword options of every method that takes texts (TEXT_OPTIONS)."""

    prompt_name: str | None
    input_type: str | None  # one of INPUT_TYPES
    truncate: bool | None
    truncation_direction: str | None  # one of TRUNCATION_DIRECTIONS


class EmbedKwargs(TextKwargs, total=False):
    """The keyword options of every embed method."""

    dtype: str
    dimensions: int | None
    normalize: bool


class SparseKwargs(TextKwargs, total=False):
    """The keyword options of embed_sparse."""

    dtype: str
    max_active_dims: int | None


class MultiVectorKwargs(TypedDict, total=False):
    """The keyword options of embed_multi: the role its texts are encoded in, the vectors'
    dtype, and how texts are truncated."""

    kind: str  # one of INPUT_TYPES' roles: query, or document
    dtype: str
    pool_factor: float | None  # documents only (POOLING_OPTIONS)
    truncate: bool | None
    truncation_direction: str | None


class MuveraKwargs(TypedDict, total=False):
    """The keyword options of embed_muvera: the role, the row's dtype, how texts are truncated,
    and the encoding's parameters (MUVERA_OPTIONS, without their muvera_ prefix)."""

    kind: str  # query, or document
    dtype: str
    k_sim: int | None
    dim_proj: int | None
    r_reps: int | None
    seed: int | None
    truncate: bool | None
    truncation_direction: str | None


class RerankKwargs(TypedDict, total=False):
    """The keyword options of rerank: top_n (RERANK_OPTIONS) and the text
    options a pair takes."""

    top_n: int | None
    truncate: bool | None
    prompt_name: str | None


def invalid(parameter: str, detail: str) -> InvalidInputError:
    """Worded like the server's errors, so `kind` and `parameter` read alike."""
    return InvalidInputError(f"invalid_parameter '{parameter}': {detail}")


def check(options: object, declared: Mapping[str, Option]) -> None:
    """Each declared option of `options` (its attribute of that name) checked once."""
    for name, option in declared.items():
        problem = option.problem(getattr(options, name))
        if problem is not None:
            raise invalid(name, problem)


def check_dtype(dtype: object, dtypes: Mapping[str, object], rows: str) -> None:
    if dtype not in dtypes:
        raise invalid(
            "dtype", f"unknown dtype {dtype!r}{rows}; expected one of {', '.join(dtypes)}"
        )


@dataclass(frozen=True)
class TextOptions:
    """How texts become tokens, for every entry point that takes texts. None
    leaves an option to the server: its default, or the model's (a model may
    default to a prompt, or to refusing over-long texts). Which prompt names
    exist is the server's to say, per model."""

    prompt_name: str | None = None
    input_type: str | None = None
    truncate: bool | None = None
    truncation_direction: str | None = None

    def __post_init__(self) -> None:
        check(self, TEXT_OPTION_DECLARATIONS)

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
        check_dtype(self.dtype, ROW_DTYPES, "")
        check(self, {name: o for name, o in ROW_OPTIONS.items() if name != "dtype"})
        super().__post_init__()

    def parameters(self) -> Parameters:
        """dtype always travels, since decoding depends on it; the others only
        when they differ from the server's defaults or are set. The server
        checks what depends on the model: the width, the prompt names."""
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
        check_dtype(self.dtype, SPARSE_VALUE_DTYPES, " for sparse rows")
        check(self, {name: o for name, o in SPARSE_ROW_OPTIONS.items() if name != "dtype"})
        super().__post_init__()

    def parameters(self) -> Parameters:
        """dtype always travels, since decoding depends on it."""
        parameters: Parameters = {"dtype": self.dtype}
        if self.max_active_dims is not None:
            parameters["max_active_dims"] = self.max_active_dims
        return parameters | self._text_parameters()


@dataclass(frozen=True)
class MultiVectorOptions(TextOptions):
    """The options of multi-vector rows, and of texts: input_type is the role the texts are
    encoded in (a query's expansion, a document's skip-list), document by default;
    pool_factor pools a document's vectors, as sentence-transformers'
    HierarchicalTokenPooling(pool_factor) does (None or 1: none)."""

    dtype: str = OPTION_DEFAULTS["dtype"]
    pool_factor: float | None = None

    def __post_init__(self) -> None:
        check_dtype(self.dtype, ROW_DTYPES, " for multi-vector rows")
        check(self, POOLING_OPTIONS)
        # As the server refuses it: sentence-transformers pools documents only by default.
        if self.pool_factor is not None and (self.input_type or MULTIVECTOR_KIND) == "query":
            raise invalid("pool_factor", "pools documents only, and the texts are queries")
        super().__post_init__()

    def parameters(self) -> Parameters:
        """dtype always travels, since decoding depends on it."""
        parameters: Parameters = {"dtype": self.dtype}
        if self.pool_factor is not None:
            parameters["pool_factor"] = self.pool_factor
        return parameters | self._text_parameters()


# The request parameter of each MuveraOptions field.
_MUVERA_PREFIX = "muvera_"


@dataclass(frozen=True)
class MuveraOptions(TextOptions):
    """The options of a MUVERA encoding (NAME_muvera), and of texts: input_type is the role
    (a query's partitions summed, a document's averaged and filled), document by default;
    k_sim, dim_proj, r_reps and seed are fastembed's Muvera's (None: the declared default).
    The server checks dim_proj against the model's vector width."""

    dtype: str = OPTION_DEFAULTS["dtype"]
    k_sim: int | None = None
    dim_proj: int | None = None
    r_reps: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        check_dtype(self.dtype, ROW_DTYPES, " for MUVERA rows")
        for name, option in MUVERA_OPTIONS.items():
            problem = option.problem(getattr(self, name.removeprefix(_MUVERA_PREFIX)))
            if problem is not None:
                raise invalid(name, problem)
        values = self._values()
        width = values["muvera_r_reps"] * 2 ** values["muvera_k_sim"] * values["muvera_dim_proj"]
        # Named as the server names it: r_reps is the one with no bound of its own.
        if width > MUVERA_MAX_WIDTH:
            raise invalid(
                "muvera_r_reps",
                f"the encoding's width r_reps * 2**k_sim * dim_proj = {width} is over "
                f"{MUVERA_MAX_WIDTH}",
            )
        super().__post_init__()

    def _values(self) -> dict[str, int]:
        """Each parameter as the server takes it: set, or its default."""
        values = {}
        for name, option in MUVERA_OPTIONS.items():
            value = getattr(self, name.removeprefix(_MUVERA_PREFIX))
            values[name] = option.default if value is None else value
        return values

    def parameters(self) -> Parameters:
        """dtype always travels, since decoding depends on it; the parameters set."""
        parameters: Parameters = {"dtype": self.dtype}
        for name in MUVERA_OPTIONS:
            value = getattr(self, name.removeprefix(_MUVERA_PREFIX))
            if value is not None:
                parameters[name] = value
        return parameters | self._text_parameters()
