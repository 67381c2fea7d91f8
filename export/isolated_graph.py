"""A graph compiled and run by its engine in a process of its own (export/engine_worker.py), for
every check and timing the export makes: an engine that dies of a signal ends that process,
not the export, which then refuses what it was trying and goes on. OpenVINO 2026.4.1 dies of
SIGFPE compiling a decoder's graph in bf16 with one thread per stream on Xeons with AMX
(docs/performance.md, "When the engine dies")."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
from model_common.exit_status import ending

WORKER = Path(__file__).resolve().with_name("engine_worker.py")
# What each engine does to a graph before it runs it, as a failure names it.
PREPARING = {"openvino": "compiling", "onnxruntime": "loading"}
# How long a worker whose input closed gets to exit before it is killed.
EXIT_TIMEOUT_S = 10.0

Feeds = Mapping[str, np.ndarray]
T = TypeVar("T")


class EngineFailed(Exception):
    """The engine could not compile, load or run the graph; the message says how and when:
    "the engine died of SIGFPE compiling it"."""


class IsolatedGraph:
    """`engine` ("openvino" or "onnxruntime") holding `graph` in a worker process, with
    `options` (OpenVINO's compile options; ONNX Runtime's {"threads": n}, or none for its
    default). open() starts it (or use it as a context manager), close() ends it; every call
    raises EngineFailed where the engine fails."""

    def __init__(self, engine: str, graph: Path, options: Mapping[str, object]) -> None:
        self._engine = engine
        self._request = (engine, str(graph), dict(options))
        self._process: subprocess.Popen[bytes] | None = None
        self.inputs: list[str] = []
        self.outputs: list[str] = []

    def open(self) -> IsolatedGraph:
        """Starts the worker and has it compile or load the graph."""
        self._process = subprocess.Popen(
            [sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            self.inputs, self.outputs = self._ask(self._request, PREPARING[self._engine])
        except EngineFailed:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Ends the worker: its input closes, and it exits."""
        process, self._process = self._process, None
        if process is None:
            return
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()
        try:
            process.wait(EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> IsolatedGraph:
        return self if self._process is not None else self.open()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def run(self, feeds: Feeds, outputs: Sequence[str] | None = None) -> list[np.ndarray]:
        """The graph's `outputs` (all of them, in order, for none) for `feeds`."""
        return list(self._ask(("run", dict(feeds), outputs), "running"))

    def rate(self, feeds: Feeds, rows: int, seconds: float) -> float:
        """Rows a second of back-to-back runs on `feeds` ([rows, ...] each) for `seconds`,
        timed inside the worker."""
        return float(self._ask(("rate", dict(feeds), rows, seconds), "running"))

    def _ask(self, request: object, doing: str) -> Any:
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            pickle.dump(request, process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            process.stdin.flush()
            status, value = pickle.load(process.stdout)
        except (BrokenPipeError, EOFError, pickle.UnpicklingError):
            raise EngineFailed(f"the engine {ending(process.wait())} {doing} it") from None
        if status != "ok":
            raise EngineFailed(f"the engine failed {doing} it: {value}")
        return value


def onnx_runtime_check(onnx_path: Path, check: Callable[[IsolatedGraph], T], what: str) -> T:
    """`check` on the ONNX graph, run by ONNX Runtime (its default threads) in a process of its
    own: an engine that dies or fails refuses the export, naming how."""
    try:
        with IsolatedGraph("onnxruntime", onnx_path, {}) as graph:
            return check(graph)
    except EngineFailed as failure:
        raise SystemExit(f"{what}: ONNX Runtime: {failure}; nothing was written") from None
