"""Reading a request's tensors and writing a response's, and the error that
refuses a request: what every Python stage's decode and respond steps
share; importable only inside a Triton Python-backend stub."""

from __future__ import annotations

import json

import numpy as np
import triton_python_backend_utils as pb_utils

from model_common.errors import ErrorKind, error_message
from model_common.options import option_error
from model_common.rows import Tokens
from model_common.tensors import ATTENTION_MASK, INPUT_IDS, QUERY, Tensor
from model_common.tokens import TokenLimits, token_error


def invalid(message: str) -> pb_utils.TritonError:
    return pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)


def input_array(request: pb_utils.InferenceRequest, tensor: Tensor) -> np.ndarray:
    return pb_utils.get_input_tensor_by_name(request, tensor.name).as_numpy()


def triton_tensor(tensor: Tensor, array: np.ndarray) -> pb_utils.Tensor:
    return pb_utils.Tensor(tensor.name, array)


def read_texts(
    request: pb_utils.InferenceRequest, tensor: Tensor, max_text_bytes: int, prefix: str = ""
) -> list[str] | pb_utils.TritonError:
    """The request's texts in input `tensor`, each after `prefix` (a
    prompt), or the error that refuses the request: none, one over
    max_text_bytes, or one that is not UTF-8."""
    name = tensor.name
    raw = input_array(request, tensor).reshape(-1)
    if raw.size == 0:
        return invalid(
            error_message(ErrorKind.INVALID_INPUT, f"{name} is empty: send at least one text")
        )
    texts = []
    for index, item in enumerate(raw):
        if len(item) > max_text_bytes:
            return invalid(
                error_message(
                    ErrorKind.INPUT_TOO_LARGE,
                    f"{name}[{index}] has {len(item)} bytes, over the limit of {max_text_bytes} "
                    "(max_text_bytes)",
                )
            )
        try:
            texts.append(prefix + bytes(item).decode("utf-8"))
        except UnicodeDecodeError as error:
            return invalid(
                error_message(
                    ErrorKind.INVALID_INPUT,
                    f"{name}[{index}] is not valid UTF-8 ({error.reason} at byte {error.start})",
                )
            )
    return texts


def read_queries(
    request: pb_utils.InferenceRequest, max_text_bytes: int
) -> list[str] | pb_utils.TritonError:
    """The request's queries (QUERY, one per pair) as read_texts reads texts, refusing an
    empty one: a query with no text ranks nothing."""
    queries = read_texts(request, QUERY, max_text_bytes)
    if isinstance(queries, pb_utils.TritonError):
        return queries
    for index, query in enumerate(queries):
        if not query.strip():
            return invalid(
                error_message(
                    ErrorKind.INVALID_INPUT,
                    f"{QUERY.name}[{index}] is empty: a query needs some text",
                )
            )
    return queries


def read_tokens(
    request: pb_utils.InferenceRequest, limits: TokenLimits, embedding_dim: int
) -> Tokens | pb_utils.TritonError:
    """A request's INPUT_IDS and ATTENTION_MASK, or the error that refuses
    it: a bad output option (an embedder is the first stage of
    `embed_tokens`; see model_common.options) or tokens the model must not
    see."""
    input_ids = input_array(request, INPUT_IDS)
    attention_mask = input_array(request, ATTENTION_MASK)
    error = option_error(json.loads(request.parameters()), embedding_dim) or token_error(
        input_ids, attention_mask, limits
    )
    return invalid(error) if error else (input_ids, attention_mask)
