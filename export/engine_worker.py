"""The process that holds one graph for export/isolated_graph.py: it compiles (OpenVINO) or
loads (ONNX Runtime) the graph, then answers runs and timings until its input closes.

Requests and answers are pickled objects, one after another, on its standard input and on the
descriptor that was its standard output; the engine's own prints go to standard error, so they
never corrupt an answer. Each answer is ("ok", value) or ("error", message): an error the engine
raises is answered, a signal that kills it is read by the parent from its exit status.

    python engine_worker.py    (spoken to by export/isolated_graph.py, not by hand)
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

Feeds = dict[str, np.ndarray]
# The graph's run: its inputs and the outputs wanted (all, in order, for none) -> those outputs.
Run = Callable[[Feeds, Sequence[str] | None], list[np.ndarray]]
# What the graph takes and gives, by name, answered once it is open.
Names = tuple[list[str], list[str]]


def open_openvino(graph: str, options: Mapping[str, Any]) -> tuple[Run, Names]:
    from model_common.openvino_runtime import ov

    compiled = ov.Core().compile_model(graph, "CPU", dict(options))
    names = [port.any_name for port in compiled.outputs]

    def run(feeds: Feeds, outputs: Sequence[str] | None) -> list[np.ndarray]:
        result = compiled(feeds)
        return [np.array(result[compiled.output(name)]) for name in outputs or names]

    return run, ([port.any_name for port in compiled.inputs], names)


def open_onnxruntime(graph: str, options: Mapping[str, Any]) -> tuple[Run, Names]:
    import onnxruntime as ort

    session_options = ort.SessionOptions()
    threads = options.get("threads")
    if threads is not None:
        session_options.intra_op_num_threads = int(threads)
        session_options.inter_op_num_threads = 1
    session = ort.InferenceSession(graph, session_options, providers=["CPUExecutionProvider"])

    def run(feeds: Feeds, outputs: Sequence[str] | None) -> list[np.ndarray]:
        return list(session.run(list(outputs) if outputs else None, feeds))

    names = ([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
    return run, names


OPENERS = {"openvino": open_openvino, "onnxruntime": open_onnxruntime}


# A timing ends after `seconds`, or sooner once it has this many runs over at least
# ENOUGH_SECONDS: that many runs time a batch as well as a second of them (the export
# alternates rounds and keeps the best), and a small model would otherwise spend its whole
# second on thousands of runs (a tiny test model's export spent 12 s of its 20 timing).
ENOUGH_RUNS = 50
ENOUGH_SECONDS = 0.1


def rows_per_s(run: Run, feeds: Feeds, rows: int, seconds: float) -> float:
    """Rows a second over back-to-back runs, for `seconds` or ENOUGH_RUNS runs, whichever
    ends first; the first run, which allocates, is not counted."""
    run(feeds, None)
    runs, start, elapsed = 0, time.perf_counter(), 0.0
    while elapsed < seconds and (runs < ENOUGH_RUNS or elapsed < ENOUGH_SECONDS):
        run(feeds, None)
        runs += 1
        elapsed = time.perf_counter() - start
    return runs * rows / elapsed


def answer(out: BinaryIO, status: str, value: object) -> None:
    pickle.dump((status, value), out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()


def serve(requests: BinaryIO, out: BinaryIO) -> None:
    engine, graph, options = pickle.load(requests)
    try:
        run, names = OPENERS[engine](graph, options)
    except Exception as error:  # the engine's own error: the parent names it
        answer(out, "error", f"{type(error).__name__}: {error}")
        return
    answer(out, "ok", names)
    while True:
        try:
            kind, *arguments = pickle.load(requests)
        except EOFError:
            return
        try:
            if kind == "run":
                value: object = run(*arguments)
            else:
                value = rows_per_s(run, *arguments)
        except Exception as error:
            answer(out, "error", f"{type(error).__name__}: {error}")
            continue
        answer(out, "ok", value)


def main() -> None:
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, out)


if __name__ == "__main__":
    main()
