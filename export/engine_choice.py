"""The choices the CPU export makes from what it measured on this machine: the precision
OpenVINO serves in and the engine served by default. Both are functions of measurements
alone, so each path (bf16 kept, bf16 refused, nothing kept, either engine faster) is tested
with given numbers on every processor, whatever the one at hand would measure. Standard
library only: the export, the launcher's log and the tests read it."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# The bar every float32-class export keeps against sentence-transformers on the original
# weights, over the export's check texts.
MIN_COSINE = 0.9999
# OpenVINO's precisions, tried in this order; the first that keeps the bar is served.
PRECISIONS = ("bf16", "f32")
# At equal one-thread speed the OpenVINO embedder serves faster: it runs a request's groups on
# both cores (its streams), the ONNX Runtime embedder on one. On an AVX2-only processor, where
# the two engines ran within 3% of each other in-process, OpenVINO served short-8 at one
# client at 130 texts/s against 72, and long-8 at 23.3 against 11.4
# (perf/results/debian12-2core-zen3-avx2/cpu_engines.md).
ONNX_RUNTIME_MARGIN = 1.05


def precision_candidates(has_bf16: bool) -> tuple[str, ...]:
    """The precisions worth measuring on a processor with or without bfloat16."""
    return tuple(p for p in PRECISIONS if p != "bf16" or has_bf16)


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision served (None: none kept its bar) and each one's measure (a bi-encoder's
    min cosine, a reranker's max score difference), in the order measured."""

    served: str | None
    measured: dict[str, float]

    def refused(self) -> dict[str, float]:
        return {p: c for p, c in self.measured.items() if p != self.served}


def keeps_cosine_bar(precision: str, min_cosine: float) -> bool:
    """A bi-encoder's bar, the same for every precision."""
    return min_cosine >= MIN_COSINE


def choose_precision(
    candidates: tuple[str, ...],
    measure: Callable[[str], float],
    keeps: Callable[[str, float], bool] = keeps_cosine_bar,
) -> PrecisionChoice:
    """Measures the candidates in order and stops at the first whose measure keeps its bar:
    a precision that misses it is never served, and one that keeps it is not passed over for
    a later one."""
    measured: dict[str, float] = {}
    for precision in candidates:
        measured[precision] = measure(precision)
        if keeps(precision, measured[precision]):
            return PrecisionChoice(precision, measured)
    return PrecisionChoice(None, measured)


def geometric_mean_speed(rates: Mapping[str, float]) -> float:
    """One engine's speed over the timed batches, each length counting alike (the time for
    one of each batch let long texts decide alone)."""
    return math.prod(rates.values()) ** (1.0 / len(rates))


def faster_engine(speeds: Mapping[str, Mapping[str, float]]) -> str:
    """The CPU engine to serve by default from texts/s per engine and batch: ONNX Runtime
    only when it runs ONNX_RUNTIME_MARGIN times OpenVINO's speed or more."""
    onnxruntime = geometric_mean_speed(speeds["onnxruntime"])
    openvino = geometric_mean_speed(speeds["openvino"])
    return "onnxruntime" if onnxruntime >= ONNX_RUNTIME_MARGIN * openvino else "openvino"
