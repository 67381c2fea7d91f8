"""The admit and release steps of a stage's execute: where its requests
enter and leave the count of the embedder's backlog (model_common.backlog),
which a first stage admits by (model_common.admission); importable only
inside a Triton Python-backend stub."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Protocol

import triton_python_backend_utils as pb_utils

from model_common.admission import METRICS_URL_VARIABLE, BacklogGate, BacklogLimit
from model_common.backlog import RELEASED, Backlog, started_count
from model_common.embedder_setup import EmbedderSetup
from model_common.tensors import ATTENTION_MASK


class Door(Protocol):
    def admit(self, requests: int, valid: int) -> None:
        """Called once an execute's `requests` are decoded, `valid` of them
        good, before any is run."""

    def release(self, responses: Sequence[pb_utils.InferenceResponse]) -> None:
        """Called with an execute's responses, before they are returned."""


class AdmissionDoor:
    """A first stage's (a tokenizer's): holds an execute until the stage it
    feeds (its config's embedder_model) has room, and counts the requests
    it releases to it."""

    def __init__(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        metrics_url = os.environ.get(METRICS_URL_VARIABLE)
        if not metrics_url:
            raise pb_utils.TritonModelException(
                f"{METRICS_URL_VARIABLE} is not set: start the server with server/launch.py, "
                "which names its metrics endpoint there"
            )
        fed = setup.text("embedder_model")
        backlog = Backlog(fed)
        self._released = backlog.own(RELEASED, args["model_instance_name"])
        self._limit = BacklogLimit(
            tokens=setup.integer("max_embedder_backlog_tokens"),
            requests=setup.integer("max_embedder_backlog"),
        )
        self._gate = BacklogGate(metrics_url, fed, self._limit, backlog)

    def admit(self, requests: int, valid: int) -> None:
        """Holds this execute until the fed stage has room, unless nothing
        is to be released. Unreadable metrics admit at once: a slower
        refusal beats a stalled pipeline."""
        if not valid:
            return
        try:
            self._gate.wait()
        except OSError as error:
            pb_utils.Logger.log_warn(f"admission: cannot read the embedder's backlog ({error})")

    def release(self, responses: Sequence[pb_utils.InferenceResponse]) -> None:
        """Counts the responses that go on to the fed stage's queue, and
        their real tokens (their ATTENTION_MASK's ones)."""
        answered = [response for response in responses if not response.has_error()]
        tokens = sum(
            int(tensor.as_numpy().sum())
            for response in answered
            for tensor in response.output_tensors()
            if tensor.name() == ATTENTION_MASK.name
        )
        self._released.add(len(answered))
        self._limit.released(len(answered), tokens)


class StartCounter:
    """A fed stage's (an embedder's, a scorer's, an encoder's): counts the
    requests it starts, every one its execute gets, good or not."""

    def __init__(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        self._started = started_count(args)

    def admit(self, requests: int, valid: int) -> None:
        self._started.add(requests)

    def release(self, responses: Sequence[pb_utils.InferenceResponse]) -> None:
        """Nothing: a fed stage's requests leave the backlog when they start."""
