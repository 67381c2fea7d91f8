"""A BGE-M3 model's call, shared by the sync and asyncio clients: the texts
checked and cut into requests, and the outputs the caller names asked for
(the server computes all three in one pass and serializes only those), each
decoded as the task whose row format it shares decodes it: the dense vectors
as embeddings, the token weights as sparse rows, the ColBERT vectors as
multi-vector rows (docs/contract.md, "BGE-M3")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple, TypedDict

import numpy as np

from embedding_client.batching import checked_texts, split_texts
from embedding_client.call import Answer, Call
from embedding_client.decode import ROW_DTYPES, SPARSE_VALUE_DTYPES, assemble
from embedding_client.multivector import MULTIVECTOR_OUTPUT, multivector_rows
from embedding_client.options import (
    OPTION_DEFAULTS,
    Parameters,
    TextOptions,
    check_dtype,
    invalid,
)
from embedding_client.sparse import SPARSE_OUTPUT, SparseRow, sparse_rows
from embedding_client.transport import OUTPUT as DENSE_OUTPUT

# Each output a request may name, and the entry point's output it is
# (model_repository/m3/embed_m3).
M3_OUTPUTS = {"dense": DENSE_OUTPUT, "sparse": SPARSE_OUTPUT, "multivector": MULTIVECTOR_OUTPUT}
# What BGEM3FlagModel.encode returns unasked.
DEFAULT_OUTPUTS = ("dense",)


class M3Kwargs(TypedDict, total=False):
    """The keyword options of embed_m3: the outputs, their dtype, a prompt, how texts are
    truncated."""

    outputs: Sequence[str]  # of M3_OUTPUTS
    dtype: str
    prompt_name: str | None
    truncate: bool | None
    truncation_direction: str | None


@dataclass(frozen=True)
class M3Options(TextOptions):
    """The outputs a call asks for, and the dtype of all of them: a sparse row's values are
    float32 or float16 only, so with sparse asked for, dtype is one of those."""

    outputs: Sequence[str] = DEFAULT_OUTPUTS
    dtype: str = OPTION_DEFAULTS["dtype"]

    def __post_init__(self) -> None:
        if isinstance(self.outputs, str):
            raise invalid("outputs", f"a list of names, got the string {self.outputs!r}")
        # Frozen: kept as the tuple it is compared and indexed as.
        object.__setattr__(self, "outputs", tuple(self.outputs))
        unknown = [name for name in self.outputs if name not in M3_OUTPUTS]
        if not self.outputs or unknown or len(set(self.outputs)) != len(self.outputs):
            raise invalid(
                "outputs",
                f"got {list(self.outputs)}; expected one or more of {', '.join(M3_OUTPUTS)}, "
                "each once",
            )
        if "sparse" in self.outputs:
            check_dtype(self.dtype, SPARSE_VALUE_DTYPES, " for sparse rows")
        else:
            check_dtype(self.dtype, ROW_DTYPES, "")
        super().__post_init__()

    def parameters(self) -> Parameters:
        """dtype always travels, since decoding depends on it."""
        return {"dtype": self.dtype} | self._text_parameters()


class M3Result(NamedTuple):
    """Each text's outputs of those asked for; None where not asked."""

    dense: np.ndarray | None  # [N, D] of the dtype
    sparse: list[SparseRow] | None  # each text's token weights
    multivector: list[np.ndarray] | None  # each text's ColBERT vectors, [n, D]


def m3_call(model: str, texts: str | Sequence[str], options: M3Options) -> Call[M3Result]:
    """The call, or InvalidInputError naming what is wrong with it."""
    split = partial(split_texts, checked_texts(texts))
    outputs = tuple(M3_OUTPUTS[name] for name in options.outputs)
    return Call(model, options.parameters(), outputs, split, partial(_result, options))


def _result(options: M3Options, answers: Sequence[Answer]) -> M3Result:
    def parts(name: str) -> list[np.ndarray]:
        at = options.outputs.index(name)
        return [answer[at] for answer in answers]

    asked = set(options.outputs)
    return M3Result(
        assemble(parts("dense"), options.dtype) if "dense" in asked else None,
        sparse_rows(options.dtype, parts("sparse")) if "sparse" in asked else None,
        multivector_rows(options.dtype, parts("multivector")) if "multivector" in asked else None,
    )
