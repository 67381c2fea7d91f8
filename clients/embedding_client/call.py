"""One call of an entry point, whatever its task, shared by the sync and asyncio
clients: the Triton model it goes to, its request parameters and the output
it reads, how its input is cut into requests of at most the server's max
batch size, and how the answers to those requests become its result.
plan.py makes the embedding calls, rerank.py a reranker's, sparse.py a
sparse encoder's, m3.py a BGE-M3 model's (several outputs of one pass)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from embedding_client.batching import Request
from embedding_client.options import Parameters

Result = TypeVar("Result")


# A request's answer: the call's outputs, each as an array, in the call's order.
Answer = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class Call(Generic[Result]):
    model: str
    parameters: Parameters
    # The outputs it asks for: an entry point of several outputs computes them all but
    # serializes only these.
    outputs: tuple[str, ...]
    # The requests for a max batch size, in order.
    split: Callable[[int], list[Request]]
    # The result from each request's answer, in the same order.
    finish: Callable[[Sequence[Answer]], Result]

    @classmethod
    def of_output(
        cls,
        model: str,
        parameters: Parameters,
        output: str,
        split: Callable[[int], list[Request]],
        finish: Callable[[Sequence[np.ndarray]], Result],
    ) -> Call[Result]:
        """A call of one output, whose `finish` takes each request's array of it."""
        return cls(
            model, parameters, (output,), split, lambda answers: finish([a for (a,) in answers])
        )

    def answer(self, result: Any) -> Answer:
        """A request's answer from tritonclient's result of it."""
        return tuple(result.as_numpy(name) for name in self.outputs)
