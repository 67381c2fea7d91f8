"""The one base of every Python-backend stage of this project (tokenizers,
embedders, a reranker's scorer, a sparse encoder's encoder); importable
only inside a Triton Python-backend stub.

A stage sets up from its model config: at initialize the tensors its code
reads and writes (its `io`, model_common.tensors) are checked against its
config.pbtxt (model_common.stage_io), and a mismatch refuses the load; then
come the parameters and its export record (model_common.embedder_setup), its
door (model_common.door) and the stage's own set-up (`_set_up`).

Every execute has one shape: each request decoded (checked where it enters;
a bad one gets its error), the call admitted through the door, the good
ones run together, each answered in order, and the responses released
through the door. A stage whose run awaits another model (BLS) returns a
coroutine from `_run`; execute then returns a coroutine too, which the
Python backend's stub runs to the responses.
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import triton_python_backend_utils as pb_utils

from model_common.door import Door
from model_common.embedder_setup import EmbedderSetup, version_dir
from model_common.record import ExportRecord
from model_common.stage_io import GraphTensors, config_mismatch, graph_mismatch
from model_common.tensors import StageIO, Tensor

Decoded = TypeVar("Decoded")  # a good request's inputs, as its stage runs them
Result = TypeVar("Result")  # what running a request gives its response
# (Strings: triton_python_backend_utils has no InferenceResponse when a stage is imported.)
Responses = list["pb_utils.InferenceResponse"]


class Stage(ABC, Generic[Decoded, Result]):
    io: ClassVar[StageIO]  # the tensors the code reads and writes
    # The admit and release steps: a first stage's AdmissionDoor, a fed
    # stage's WorkCounter.
    admission: ClassVar[Callable[[Mapping[str, str], EmbedderSetup], Door]]

    def initialize(self, args: dict[str, str]) -> None:
        self._model = args["model_name"]
        mismatch = config_mismatch(self._model, json.loads(args["model_config"]), self.io)
        if mismatch:
            raise pb_utils.TritonModelException(mismatch)
        setup = EmbedderSetup.from_args(args, self._read_record(version_dir(args)))
        self._door = self.admission(args, setup)
        self._set_up(args, setup)

    def _read_record(self, version_dir: Path) -> ExportRecord:
        """The export record the stage runs by: its version folder's."""
        return ExportRecord.read(version_dir)

    def _check_graph(
        self,
        graph_file: str,
        graph: GraphTensors,
        feeds: Sequence[Tensor],
        reads: Sequence[Tensor],
    ) -> None:
        """Refuses the load where the loaded graph does not take `feeds` or
        give `reads` (model_common.stage_io)."""
        mismatch = graph_mismatch(self._model, graph_file, graph, feeds, reads)
        if mismatch:
            raise pb_utils.TritonModelException(mismatch)

    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> Responses | Coroutine[Any, Any, Responses]:
        decoded = [self._decode(request) for request in requests]
        valid = [item for item in decoded if not isinstance(item, pb_utils.TritonError)]
        self._door.admit(len(requests), len(valid), self._tokens(valid))
        ran = self._run(valid) if valid else []
        if asyncio.iscoroutine(ran):
            return self._respond_when_run(decoded, ran)
        return self._respond_all(decoded, ran)

    async def _respond_when_run(
        self,
        decoded: Sequence[Decoded | pb_utils.TritonError],
        running: Coroutine[Any, Any, Sequence[Result | pb_utils.TritonError]],
    ) -> Responses:
        return self._respond_all(decoded, await running)

    def _respond_all(
        self,
        decoded: Sequence[Decoded | pb_utils.TritonError],
        outcomes: Sequence[Result | pb_utils.TritonError],
    ) -> Responses:
        """One response per request, in order, released through the door."""
        ran = iter(outcomes)
        responses = [self._response(item, ran) for item in decoded]
        self._door.release(responses)
        return responses

    def _response(
        self, item: Decoded | pb_utils.TritonError, ran: Iterator[Result | pb_utils.TritonError]
    ) -> pb_utils.InferenceResponse:
        if isinstance(item, pb_utils.TritonError):
            return pb_utils.InferenceResponse(error=item)
        outcome = next(ran)
        if isinstance(outcome, pb_utils.TritonError):
            return pb_utils.InferenceResponse(error=outcome)
        return self._respond(item, outcome)

    def _tokens(self, batch: list[Decoded]) -> int:
        """The real tokens of a call's good requests where they are known
        before it runs (a fed stage's token ids); a first stage's texts: 0."""
        return 0

    @abstractmethod
    def _set_up(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        """What the stage loads: its tokenizer, its graph (checked with
        `_check_graph`), its limits."""

    @abstractmethod
    def _decode(self, request: pb_utils.InferenceRequest) -> Decoded | pb_utils.TritonError:
        """The request's inputs, checked, or the error that refuses it."""

    @abstractmethod
    def _run(
        self, batch: list[Decoded]
    ) -> (
        Sequence[Result | pb_utils.TritonError]
        | Coroutine[Any, Any, Sequence[Result | pb_utils.TritonError]]
    ):
        """Every good request of the call run together: each one's Result,
        or the TritonError that fails it alone, in order."""

    @abstractmethod
    def _respond(self, item: Decoded, result: Result) -> pb_utils.InferenceResponse:
        """A good request's response from its Result; it may still refuse the
        request (a tokenizer's text over the max length, truncation off)."""
