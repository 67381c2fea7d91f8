"""The admit and release steps of a stage's execute: where its requests
enter and leave the count of the embedder's backlog, and the embedder counts
its work (model_common.backlog), which a first stage admits by
(model_common.admission); importable only inside a Triton Python-backend
stub."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

import triton_python_backend_utils as pb_utils

from model_common.admission import METRICS_URL_VARIABLE, BacklogGate, BacklogLimit
from model_common.backlog import RAN_CPU_US, RAN_TOKENS, RELEASED, STARTED, Backlog
from model_common.cores import usable_cpus
from model_common.embedder_setup import EmbedderSetup
from model_common.tensors import ATTENTION_MASK


class Door(Protocol):
    def admit(self, requests: int, valid: int, tokens: int) -> None:
        """Called once an execute's `requests` are decoded, `valid` of them
        good with `tokens` real tokens in all (0 where not known before the
        run: texts), before any is run."""

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
            seconds=setup.seconds("max_embedder_backlog_seconds"),
            requests=setup.integer("max_embedder_backlog"),
            cpus=usable_cpus(),
        )
        self._gate = BacklogGate(metrics_url, fed, self._limit, backlog)

    def admit(self, requests: int, valid: int, tokens: int) -> None:
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
        """Counts the requests that go on to the fed stage's queue, and
        their real tokens: each attention mask a response holds is one
        request there (a query's and a document's go to the same encoder)."""
        masks = [
            tensor.as_numpy()
            for response in responses
            if not response.has_error()
            for tensor in response.output_tensors()
            if tensor.name().endswith(ATTENTION_MASK.name)
        ]
        tokens = sum(int(mask.sum()) for mask in masks)
        self._released.add(len(masks))
        self._limit.released(len(masks), tokens)


class WorkCounter:
    """A fed stage's (an embedder's, a scorer's, an encoder's): counts the
    requests it starts, every one its execute gets, good or not, and its
    work: the real tokens of the good ones, and its process's CPU time from
    its first execute on, counted at each release (so an execute that
    awaits another model and overlaps the next is counted once, and one
    that raised is counted with the next)."""

    def __init__(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        backlog = Backlog(args["model_name"])
        instance = args["model_instance_name"]
        self._started = backlog.own(STARTED, instance)
        self._tokens = backlog.own(RAN_TOKENS, instance)
        self._cpu_us = backlog.own(RAN_CPU_US, instance)
        # Not at construction: loading the engine after it is no work served.
        self._counted_to: float | None = None

    def admit(self, requests: int, valid: int, tokens: int) -> None:
        self._started.add(requests)
        self._tokens.add(tokens)
        if self._counted_to is None:
            self._counted_to = time.process_time()

    def release(self, responses: Sequence[pb_utils.InferenceResponse]) -> None:
        """A fed stage's requests left the backlog when they started."""
        now = time.process_time()
        if self._counted_to is not None:
            self._cpu_us.add(round((now - self._counted_to) * 1e6))
        self._counted_to = now
