"""The request handling every Python-backend model of this project shares;
importable only inside a Triton Python-backend stub."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import triton_python_backend_utils as pb_utils

from model_common.options import option_error
from model_common.tokens import TokenLimits, token_error

Tokens = tuple[np.ndarray, np.ndarray]
Checked = TypeVar("Checked")


def invalid(message: str) -> pb_utils.TritonError:
    return pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)


def option_check(request: pb_utils.InferenceRequest, embedding_dim: int) -> str | None:
    """The request's bad output option, if any (see model_common.options)."""
    return option_error(json.loads(request.parameters()), embedding_dim)


def read_tokens(
    request: pb_utils.InferenceRequest, limits: TokenLimits, embedding_dim: int
) -> Tokens | pb_utils.TritonError:
    """A request's INPUT_IDS and ATTENTION_MASK, or the error that refuses
    it: a bad option (an embedder is the first stage of `embed_tokens`) or
    tokens the model must not see."""
    input_ids = pb_utils.get_input_tensor_by_name(request, "INPUT_IDS").as_numpy()
    attention_mask = pb_utils.get_input_tensor_by_name(request, "ATTENTION_MASK").as_numpy()
    error = option_check(request, embedding_dim) or token_error(input_ids, attention_mask, limits)
    return invalid(error) if error else (input_ids, attention_mask)


def respond_in_order(
    checked: Sequence[Checked | pb_utils.TritonError],
    run: Callable[[list[Checked]], list[pb_utils.InferenceResponse]],
) -> list[pb_utils.InferenceResponse]:
    """One response per request, in order: refused requests get their
    error, the others one `run` over all of them together."""
    valid = [item for item in checked if not isinstance(item, pb_utils.TritonError)]
    outputs = iter(run(valid) if valid else [])
    return [
        pb_utils.InferenceResponse(error=item)
        if isinstance(item, pb_utils.TritonError)
        else next(outputs)
        for item in checked
    ]


def embedding_response(embedding: np.ndarray, norm: np.ndarray) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor("EMBEDDING", embedding), pb_utils.Tensor("NORM", norm)]
    )
