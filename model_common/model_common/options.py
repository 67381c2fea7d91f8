"""The request parameters that choose the output row format (dtype,
dimensions, normalize), checked at the first stage of each ensemble.

The serializer (backends/embedding_serializer/src/request_options.cc)
applies them at the last stage; this check refuses a bad one before
tokenization and inference are spent on it, with the serializer's message.
Other parameter keys belong to other stages and pass.
"""

from __future__ import annotations

from collections.abc import Mapping

from model_common.errors import ErrorKind, error_message

ROW_DTYPES = ("float32", "float16", "int8", "uint8", "binary", "ubinary")
BIT_PACKED = ("binary", "ubinary")


def _invalid(parameter: str, detail: str) -> str:
    return error_message(ErrorKind.INVALID_PARAMETER, detail, parameter)


def option_error(parameters: Mapping[str, object], embedding_dim: int) -> str | None:
    """The error message for the first bad option, or None when all are good.
    `parameters` are the request's parameters as Triton's JSON gives them."""
    dtype = parameters.get("dtype", "float32")
    if not isinstance(dtype, str):
        return _invalid("dtype", "must be a string")
    if dtype not in ROW_DTYPES:
        return _invalid(
            "dtype",
            f"unknown dtype '{dtype}' (expected float32, float16, int8, uint8, binary or ubinary)",
        )
    dimensions = parameters.get("dimensions")
    # bool is an int in Python; Triton's boolean parameters are not integers.
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int)):
        return _invalid("dimensions", "must be an integer")
    normalize = parameters.get("normalize", True)
    if not isinstance(normalize, bool):
        return _invalid("normalize", "must be a boolean")
    if dimensions is not None and not 1 <= dimensions <= embedding_dim:
        return _invalid("dimensions", f"{dimensions} is outside 1..{embedding_dim}")
    kept = embedding_dim if dimensions is None else dimensions
    if dtype in BIT_PACKED and kept % 8 != 0:
        return _invalid(
            "dimensions",
            "binary and ubinary pack 8 dimensions per byte, so the dimensions must be "
            f"a multiple of 8, got {kept}",
        )
    return None
