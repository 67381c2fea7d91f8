"""The run step of a stage that runs an engine in its own process: the
call's good requests run merged, and where the engine fails on the merged
run (a request's values break the graph), each request runs alone, so one
request's values never fail the others merged with it; importable only
inside a Triton Python-backend stub."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import triton_python_backend_utils as pb_utils

from model_common.errors import ErrorKind, error_message
from model_common.request_io import invalid

Item = TypeVar("Item")
Out = TypeVar("Out")


def run_merged(
    batch: Sequence[Item],
    run: Callable[[Sequence[Item]], list[Out]],
    run_errors: tuple[type[Exception], ...],
) -> list[Out | pb_utils.TritonError]:
    """Each request's output from `run` over all of them; where it raises
    one of `run_errors`, from `run` over each alone, or its error."""
    try:
        return list(run(batch))
    except run_errors:
        return [_alone(item, run, run_errors) for item in batch]


def _alone(
    item: Item,
    run: Callable[[Sequence[Item]], list[Out]],
    run_errors: tuple[type[Exception], ...],
) -> Out | pb_utils.TritonError:
    try:
        return run([item])[0]
    except run_errors as error:
        return invalid(
            error_message(ErrorKind.INVALID_INPUT, f"the model rejected the tokens: {error}")
        )


def request_splits(rows: Sequence[int]) -> np.ndarray:
    """Where merged rows split into their requests', for np.split."""
    return np.cumsum(rows)[:-1]
