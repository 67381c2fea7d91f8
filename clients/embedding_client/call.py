"""One call of an entry point, whatever its task, shared by the sync and asyncio
clients: the Triton model it goes to, its request parameters and the output
it reads, how its input is cut into requests of at most the server's max
batch size, and how the answers to those requests become its result.
plan.py makes the embedding calls, rerank.py a reranker's, sparse.py a
sparse encoder's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from embedding_client.batching import Request
from embedding_client.options import Parameters

Result = TypeVar("Result")


@dataclass(frozen=True)
class Call(Generic[Result]):
    model: str
    parameters: Parameters
    output: str
    # The requests for a max batch size, in order.
    split: Callable[[int], list[Request]]
    # The result from each request's output, in the same order.
    finish: Callable[[Sequence[np.ndarray]], Result]
