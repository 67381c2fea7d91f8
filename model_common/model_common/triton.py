"""The request handling every Python-backend model of this project shares;
importable only inside a Triton Python-backend stub."""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import triton_python_backend_utils as pb_utils

from model_common.admission import METRICS_URL_VARIABLE, BacklogGate, BacklogLimit
from model_common.backlog import RELEASED, Backlog, Count, started_count
from model_common.embedder_setup import EmbedderSetup
from model_common.errors import ErrorKind, error_message
from model_common.options import option_error
from model_common.rows import Embeddings, Tokens, embed_in_groups
from model_common.tokens import TokenLimits, stack_tokens, token_error

Checked = TypeVar("Checked")


def invalid(message: str) -> pb_utils.TritonError:
    return pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)


def read_texts(
    request: pb_utils.InferenceRequest, name: str, max_text_bytes: int, prefix: str = ""
) -> list[str] | pb_utils.TritonError:
    """The request's texts in input `name`, each after `prefix` (a prompt),
    or the error that refuses the request: none, one over max_text_bytes,
    or one that is not UTF-8."""
    raw = pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)
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


class AdmissionDoor:
    """A model's first stage's admission (model_common.admission): holds an
    execute until the stage it feeds (its config's embedder_model) has
    room, and counts the requests it releases to it."""

    def __init__(self, args: Mapping[str, str], parameters: Mapping[str, Any]) -> None:
        metrics_url = os.environ.get(METRICS_URL_VARIABLE)
        if not metrics_url:
            raise pb_utils.TritonModelException(
                f"{METRICS_URL_VARIABLE} is not set: start the server with server/launch.py, "
                "which names its metrics endpoint there"
            )
        fed = parameters["embedder_model"]["string_value"]
        backlog = Backlog(fed)
        self._released = backlog.own(RELEASED, args["model_instance_name"])
        self._limit = BacklogLimit(
            tokens=int(parameters["max_embedder_backlog_tokens"]["string_value"]),
            requests=int(parameters["max_embedder_backlog"]["string_value"]),
        )
        self._gate = BacklogGate(metrics_url, fed, self._limit, backlog)

    def admit(self) -> None:
        """Holds this execute until the fed stage has room. Unreadable
        metrics admit at once: a slower refusal beats a stalled pipeline."""
        try:
            self._gate.wait()
        except OSError as error:
            pb_utils.Logger.log_warn(f"admission: cannot read the embedder's backlog ({error})")

    def released(self, responses: Sequence[pb_utils.InferenceResponse]) -> None:
        """Counts the responses that go on to the fed stage's queue, and
        their real tokens (their ATTENTION_MASK's ones)."""
        answered = [response for response in responses if not response.has_error()]
        tokens = sum(
            int(tensor.as_numpy().sum())
            for response in answered
            for tensor in response.output_tensors()
            if tensor.name() == "ATTENTION_MASK"
        )
        self._released.add(len(answered))
        self._limit.released(len(answered), tokens)


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


def embed_execute(
    requests: list[pb_utils.InferenceRequest],
    limits: TokenLimits,
    embedding_dim: int,
    embed_rows: Callable[[np.ndarray, np.ndarray], Embeddings],
    run_errors: tuple[type[Exception], ...],
) -> list[pb_utils.InferenceResponse]:
    """A CPU embedder's execute: every request checked, the valid ones
    embedded together (embed_requests), one response each, in order."""
    checked = [read_tokens(request, limits, embedding_dim) for request in requests]
    return respond_in_order(checked, lambda batch: embed_requests(batch, embed_rows, run_errors))


def embed_requests(
    batch: list[Tokens],
    embed_rows: Callable[[np.ndarray, np.ndarray], Embeddings],
    run_errors: tuple[type[Exception], ...],
) -> list[pb_utils.InferenceResponse]:
    """One response per request of the batch, all rows embedded together.
    `run_errors` are what the engine raises when a request's values break
    the graph: then each request runs alone, so one request's values never
    fail the others merged with it."""
    try:
        embedding, norm = embed_rows(*stack_tokens(batch))
    except run_errors:
        return [_embed_alone(tokens, embed_rows, run_errors) for tokens in batch]
    splits = np.cumsum([input_ids.shape[0] for input_ids, _ in batch])[:-1]
    return [
        embedding_response(rows, row_norms)
        for rows, row_norms in zip(np.split(embedding, splits), np.split(norm, splits), strict=True)
    ]


def _embed_alone(
    tokens: Tokens,
    embed_rows: Callable[[np.ndarray, np.ndarray], Embeddings],
    run_errors: tuple[type[Exception], ...],
) -> pb_utils.InferenceResponse:
    try:
        return embedding_response(*embed_rows(*tokens))
    except run_errors as error:
        return pb_utils.InferenceResponse(
            error=invalid(
                error_message(ErrorKind.INVALID_INPUT, f"the model rejected the tokens: {error}")
            )
        )


class GroupedEmbedder(ABC):
    """The execute of an embedder that runs each call's rows in length-sorted
    groups (model_common.rows): every request checked, the valid ones'
    rows cut into groups by `_cut_groups` and run by `_run_groups`. A model's
    initialize starts with `_set_up`."""

    _dims: int
    _limits: TokenLimits
    _run_errors: tuple[type[Exception], ...]
    _started: Count

    def _set_up(
        self, args: dict[str, str], run_errors: tuple[type[Exception], ...]
    ) -> EmbedderSetup:
        """Reads the setup; `run_errors` are what the engine raises when a
        request's values break the graph."""
        setup = EmbedderSetup.from_args(args)
        self._dims = setup.dims
        self._limits = setup.limits
        self._run_errors = run_errors
        self._started = started_count(args)
        return setup

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        self._started.add(len(requests))
        return embed_execute(requests, self._limits, self._dims, self._embed_rows, self._run_errors)

    def _embed_rows(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> Embeddings:
        return embed_in_groups(
            input_ids, attention_mask, self._dims, self._cut_groups, self._run_groups
        )

    @abstractmethod
    def _cut_groups(self, lengths: np.ndarray) -> list[np.ndarray]:
        """The rows of each group, from the rows' real lengths."""

    @abstractmethod
    def _run_groups(self, groups: Sequence[Tokens]) -> list[Embeddings]:
        """Each group's embeddings and norms, in order."""
