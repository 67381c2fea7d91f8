"""The request parameters that choose the output row format (dtype,
dimensions, normalize; for sparse and multi-vector rows their own, and a
multi-vector encoder's token pooling and MUVERA encoding), checked at the
first stage of each ensemble.

The serializer (backends/embedding_serializer/src/request_options.cc)
applies them at the last stage; this check refuses a bad one before
tokenization and inference are spent on it, with the serializer's message.
Other parameter keys belong to other stages and pass.

The formats, the options' defaults and the messages come from
row_formats.json, the one declaration that the C++ tests hold the
serializer to (docs/adding_a_row_format.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from model_common.errors import ErrorKind, error_message
from model_common.multivector import DOCUMENT
from model_common.muvera import MuveraParameters


@dataclass(frozen=True)
class RowFormat:
    name: str
    # None for a bit-packed format: 8 values per byte.
    bytes_per_value: int | None
    # The dtype a client views the row's little-endian bytes as.
    numpy: str

    @property
    def bit_packed(self) -> bool:
        return self.bytes_per_value is None


def _row_format(entry: Mapping[str, Any]) -> RowFormat:
    width = entry.get("bytes_per_value")
    packed = entry.get("bit_packed", False) is True
    # Exactly one of the two, so that a format's width is never ambiguous.
    if packed == (width is not None) or not (packed or (isinstance(width, int) and width > 0)):
        raise ValueError(f"row_formats.json: {entry!r} needs bytes_per_value or bit_packed")
    return RowFormat(entry["name"], width, entry["numpy"])


DECLARATION: dict[str, Any] = json.loads(
    files("model_common").joinpath("row_formats.json").read_text(encoding="utf-8")
)
ROW_FORMATS: dict[str, RowFormat] = {
    entry["name"]: _row_format(entry) for entry in DECLARATION["dtypes"]
}
ROW_DTYPES = tuple(ROW_FORMATS)
BIT_PACKED = tuple(name for name, row_format in ROW_FORMATS.items() if row_format.bit_packed)
OPTION_DEFAULTS: dict[str, object] = {
    option["name"]: option["default"] for option in DECLARATION["options"]
}
_OPTION_TYPES: dict[str, str] = {
    option["name"]: option["type"] for option in DECLARATION["options"]
}
_MESSAGES: dict[str, str] = DECLARATION["messages"]
# The least value of each integer option (the serializer's bound too).
_MINIMA: dict[str, int] = {
    option["name"]: option["minimum"]
    for option in (*DECLARATION["options"], *DECLARATION["sparse"]["options"])
    if "minimum" in option
}


def _listed(names: tuple[str, ...], last: str) -> str:
    """Names as "a, b or c" (last="or"), the way the serializer lists them."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"


def _invalid(parameter: str, message: str, **values: object) -> str:
    return error_message(
        ErrorKind.INVALID_PARAMETER, _MESSAGES[message].format(**values), parameter
    )


def _wrong_type(parameter: str) -> str:
    return _invalid(parameter, "wrong_type", type=_OPTION_TYPES[parameter])


def option_error(parameters: Mapping[str, object], embedding_dim: int) -> str | None:
    """The error message for the first bad option, or None when all are good.
    `parameters` are the request's parameters as Triton's JSON gives them."""
    dtype = parameters.get("dtype", OPTION_DEFAULTS["dtype"])
    if not isinstance(dtype, str):
        return _wrong_type("dtype")
    if dtype not in ROW_FORMATS:
        return _invalid("dtype", "unknown_dtype", dtype=dtype, dtypes=_listed(ROW_DTYPES, "or"))
    dimensions = parameters.get("dimensions", OPTION_DEFAULTS["dimensions"])
    # bool is an int in Python; Triton's boolean parameters are not integers.
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int)):
        return _wrong_type("dimensions")
    normalize = parameters.get("normalize", OPTION_DEFAULTS["normalize"])
    if not isinstance(normalize, bool):
        return _wrong_type("normalize")
    if dimensions is not None and not _MINIMA["dimensions"] <= dimensions <= embedding_dim:
        return _invalid(
            "dimensions", "dimensions_outside", dimensions=dimensions, model_dims=embedding_dim
        )
    kept = embedding_dim if dimensions is None else dimensions
    if ROW_FORMATS[dtype].bit_packed and kept % 8 != 0:
        return _invalid(
            "dimensions", "not_whole_bytes", bit_packed=_listed(BIT_PACKED, "and"), dimensions=kept
        )
    return None


# Sparse rows (a learned-sparse encoder's serializer,
# backends/embedding_serializer/src/sparse_options.cc): the value dtype and
# top-k, declared in row_formats.json's "sparse" section.
_SPARSE: dict[str, Any] = DECLARATION["sparse"]
SPARSE_VALUE_DTYPES = tuple(entry["name"] for entry in _SPARSE["value_dtypes"])
SPARSE_OPTION_DEFAULTS: dict[str, object] = {
    option["name"]: option["default"] for option in _SPARSE["options"]
}
_SPARSE_OPTION_TYPES: dict[str, str] = {
    option["name"]: option["type"] for option in _SPARSE["options"]
}
# Refused by name rather than ignored, so that a client learns they had no effect.
_DENSE_ONLY_OPTIONS = tuple(name for name in OPTION_DEFAULTS if name not in SPARSE_OPTION_DEFAULTS)


def _sparse_invalid(parameter: str, message: str, **values: object) -> str:
    return error_message(
        ErrorKind.INVALID_PARAMETER, _SPARSE["messages"][message].format(**values), parameter
    )


def sparse_option_error(parameters: Mapping[str, Any], vocab_size: int) -> str | None:
    """The error message for the first bad sparse-row option, or None when all
    are good; `vocab_size` is the row width the encoder writes. Other keys
    than the options and the dense ones belong to other stages and pass."""
    dtype = parameters.get("dtype", SPARSE_OPTION_DEFAULTS["dtype"])
    if not isinstance(dtype, str):
        return _invalid("dtype", "wrong_type", type=_SPARSE_OPTION_TYPES["dtype"])
    if dtype not in SPARSE_VALUE_DTYPES:
        return _sparse_invalid(
            "dtype",
            "unknown_value_dtype",
            dtype=dtype,
            value_dtypes=_listed(SPARSE_VALUE_DTYPES, "or"),
        )
    max_active_dims = parameters.get("max_active_dims", SPARSE_OPTION_DEFAULTS["max_active_dims"])
    # bool is an int in Python; Triton's boolean parameters are not integers.
    if max_active_dims is not None and (
        isinstance(max_active_dims, bool) or not isinstance(max_active_dims, int)
    ):
        return _invalid(
            "max_active_dims", "wrong_type", type=_SPARSE_OPTION_TYPES["max_active_dims"]
        )
    for name in _DENSE_ONLY_OPTIONS:
        if name in parameters:
            return _sparse_invalid(
                name, "dense_option", options=_listed(tuple(SPARSE_OPTION_DEFAULTS), "and")
            )
    if (
        max_active_dims is not None
        and not _MINIMA["max_active_dims"] <= max_active_dims <= vocab_size
    ):
        return _sparse_invalid(
            "max_active_dims",
            "max_active_dims_outside",
            max_active_dims=max_active_dims,
            vocab_size=vocab_size,
        )
    return None


# Multi-vector rows (a late-interaction model's serializer,
# backends/embedding_serializer/src/multivector_options.cc): the vectors'
# dtype, any of the dense ones, declared in row_formats.json's "multivector"
# section.
_MULTIVECTOR: dict[str, Any] = DECLARATION["multivector"]
MULTIVECTOR_OPTION_DEFAULTS: dict[str, object] = {
    option["name"]: option["default"] for option in _MULTIVECTOR["options"]
}
_MULTIVECTOR_OPTION_TYPES: dict[str, str] = {
    option["name"]: option["type"] for option in _MULTIVECTOR["options"]
}
# The dense and sparse options that are not multi-vector ones, refused by
# name rather than ignored, so that a client learns they had no effect.
_MULTIVECTOR_REFUSED_OPTIONS = tuple(
    name
    for name in {**OPTION_DEFAULTS, **SPARSE_OPTION_DEFAULTS}
    if name not in MULTIVECTOR_OPTION_DEFAULTS
)


def multivector_option_error(parameters: Mapping[str, Any], vector_dim: int) -> str | None:
    """The error message for the first bad multi-vector-row option, or None
    when all are good; `vector_dim` is the width D of the model's vectors.
    Other keys than the options and the refused ones (the text options,
    any other stage's) belong to other stages and pass."""
    dtype = parameters.get("dtype", MULTIVECTOR_OPTION_DEFAULTS["dtype"])
    if not isinstance(dtype, str):
        return _invalid("dtype", "wrong_type", type=_MULTIVECTOR_OPTION_TYPES["dtype"])
    if dtype not in ROW_FORMATS:
        return _invalid("dtype", "unknown_dtype", dtype=dtype, dtypes=_listed(ROW_DTYPES, "or"))
    for name in _MULTIVECTOR_REFUSED_OPTIONS:
        if name in parameters:
            return error_message(
                ErrorKind.INVALID_PARAMETER,
                _MULTIVECTOR["messages"]["refused_option"].format(
                    options=_listed(tuple(MULTIVECTOR_OPTION_DEFAULTS), "and")
                ),
                name,
            )
    # Named after dtype, the option at fault: the vectors' width is the model's.
    if ROW_FORMATS[dtype].bit_packed and vector_dim % 8 != 0:
        return _invalid(
            "dtype", "not_whole_bytes", bit_packed=_listed(BIT_PACKED, "and"), dimensions=vector_dim
        )
    return None


# Token pooling (model_common.token_pooling): the request's pool_factor, which the tokenizer
# stages check and pass on to the encoder; the serializer never sees it as a row option.
_POOLING_OPTIONS: dict[str, Any] = {
    option["name"]: option for option in _MULTIVECTOR["pooling_options"]
}
_POOL_FACTOR = _POOLING_OPTIONS["pool_factor"]


def pool_factor_error(parameters: Mapping[str, Any], role: str) -> str | None:
    """The error message for a bad pool_factor, or None where it is good or absent. Only a
    document request pools: `role` is the one the request's texts are encoded in."""
    factor = parameters.get("pool_factor", _POOL_FACTOR["default"])
    if factor is None:
        return None
    # bool is an int in Python; a number here is an integer or a float, never a boolean.
    if isinstance(factor, bool) or not isinstance(factor, int | float):
        return _invalid("pool_factor", "wrong_type", type=_POOL_FACTOR["type"])
    if not factor >= _POOL_FACTOR["minimum"]:  # a NaN fails here too
        return error_message(
            ErrorKind.INVALID_PARAMETER,
            f"must be {_POOL_FACTOR['type']} of at least {_POOL_FACTOR['minimum']}, got {factor}",
            "pool_factor",
        )
    if role != DOCUMENT:
        return error_message(
            ErrorKind.INVALID_PARAMETER,
            _MULTIVECTOR["messages"]["query_pooled"].format(input_type=role),
            "pool_factor",
        )
    return None


def pool_factor(parameters: Mapping[str, Any]) -> float | None:
    """The request's pool_factor (checked by pool_factor_error), or None for none."""
    factor = parameters.get("pool_factor", _POOL_FACTOR["default"])
    return None if factor is None else float(factor)


# MUVERA (model_common.muvera): the parameters of a multi-vector encoder's NAME_muvera, which the
# tokenizer stage checks and the muvera stage applies; the serializer never sees them as row
# options. Defaults and bounds are row_formats.json's.
_MUVERA_OPTIONS: dict[str, Any] = {
    option["name"]: option for option in _MULTIVECTOR["muvera_options"]
}
_MUVERA_MAX_WIDTH: int = _MULTIVECTOR["muvera_max_width"]
# The one without a bound of its own is named where the product is too wide.
_MUVERA_WIDEST = "muvera_r_reps"


def _muvera_values(parameters: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: parameters.get(name, option["default"]) for name, option in _MUVERA_OPTIONS.items()
    }


def muvera_option_error(parameters: Mapping[str, Any], vector_dim: int) -> str | None:
    """The error message for the first bad MUVERA parameter, or None where all are good or
    absent; `vector_dim` is the width D of the model's vectors, the most muvera_dim_proj
    may keep."""
    values = _muvera_values(parameters)
    maxima = {"muvera_dim_proj": vector_dim, "muvera_seed": DECLARATION["integer_maximum"]}
    for name, value in values.items():
        option = _MUVERA_OPTIONS[name]
        # bool is an int in Python; Triton's boolean parameters are not integers.
        if isinstance(value, bool) or not isinstance(value, int):
            return _invalid(name, "wrong_type", type=option["type"])
        maximum = option.get("maximum", maxima.get(name, _MUVERA_MAX_WIDTH))
        if not option["minimum"] <= value <= maximum:
            return error_message(
                ErrorKind.INVALID_PARAMETER,
                _MULTIVECTOR["messages"]["muvera_outside"].format(
                    minimum=option["minimum"], maximum=maximum, value=value
                ),
                name,
            )
    width = muvera_parameters(parameters).width
    if width > _MUVERA_MAX_WIDTH:
        return error_message(
            ErrorKind.INVALID_PARAMETER,
            _MULTIVECTOR["messages"]["muvera_too_wide"].format(
                width=width, max_width=_MUVERA_MAX_WIDTH
            ),
            _MUVERA_WIDEST,
        )
    return None


def muvera_parameters(parameters: Mapping[str, Any]) -> MuveraParameters:
    """The request's MUVERA parameters (checked by muvera_option_error), defaults filled in."""
    values = _muvera_values(parameters)
    return MuveraParameters(
        k_sim=int(values["muvera_k_sim"]),
        dim_proj=int(values["muvera_dim_proj"]),
        r_reps=int(values["muvera_r_reps"]),
        seed=int(values["muvera_seed"]),
    )
