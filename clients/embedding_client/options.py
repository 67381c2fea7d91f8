"""The request parameters of the embedding ensembles, checked before sending."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from embedding_client.decode import ROW_DTYPES
from embedding_client.errors import InvalidInputError

Parameters = dict[str, str | int | bool]


class EmbedKwargs(TypedDict, total=False):
    """The keyword options of every embed method."""

    dtype: str
    dimensions: int | None
    normalize: bool


@dataclass(frozen=True)
class EmbedOptions:
    dtype: str = "float32"
    dimensions: int | None = None
    normalize: bool = True

    def __post_init__(self) -> None:
        if self.dtype not in ROW_DTYPES:
            raise InvalidInputError(
                f"invalid_parameter 'dtype': unknown dtype {self.dtype!r}; "
                f"expected one of {', '.join(ROW_DTYPES)}"
            )
        if self.dimensions is not None and (
            isinstance(self.dimensions, bool) or not isinstance(self.dimensions, int)
        ):
            raise InvalidInputError(
                f"invalid_parameter 'dimensions': must be an integer, got {self.dimensions!r}"
            )
        if not isinstance(self.normalize, bool):
            raise InvalidInputError(
                f"invalid_parameter 'normalize': must be a boolean, got {self.normalize!r}"
            )

    def parameters(self) -> Parameters:
        """dtype always travels, since decoding depends on it; the others only
        when they differ from the server's defaults. The server checks ranges."""
        parameters: Parameters = {"dtype": self.dtype}
        if self.dimensions is not None:
            parameters["dimensions"] = self.dimensions
        if not self.normalize:
            parameters["normalize"] = False
        return parameters
