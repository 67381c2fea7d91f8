"""The choices the CPU export makes from what it measured on this machine: the OpenVINO
setting served (precision, and threads per stream where the engine died with one) and the
engine served by default. Both are functions of measurements alone, so each path (bf16 kept,
bf16 refused, bf16's engine dead, nothing kept, either engine faster) is tested with given
numbers on every processor, whatever the one at hand would measure. Standard library and
model_common only: the export, the launcher's log and the tests read it."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from model_common.openvino_setting import THREADS_PER_STREAM, Setting

# The bar every float32-class export keeps against sentence-transformers on the original
# weights, over the export's check texts.
MIN_COSINE = 0.9999
# At equal one-thread speed the OpenVINO embedder serves faster: it runs a request's groups on
# both cores (its streams), the ONNX Runtime embedder on one. On an AVX2-only processor, where
# the two engines ran within 3% of each other in-process, OpenVINO served short-8 at one
# client at 130 texts/s against 72, and long-8 at 23.3 against 11.4
# (perf/results/debian12-2core-zen3-avx2/cpu_engines.md).
ONNX_RUNTIME_MARGIN = 1.05


@dataclass(frozen=True)
class Failure:
    """A setting the engine could not compile or run: "the engine died of SIGFPE compiling it"."""

    reason: str


# What measuring one setting gives: its measure (a bi-encoder's min cosine, a reranker's max
# score difference), or how the engine failed.
Outcome = float | Failure


@dataclass(frozen=True)
class SettingChoice:
    """The setting served (None: none kept its bar), each measured setting's measure and each
    failed setting's reason, by setting label, in the order tried."""

    served: Setting | None
    measured: dict[str, float]
    failed: dict[str, str]

    def refused(self) -> dict[str, float]:
        served = self.served.label if self.served else None
        return {label: value for label, value in self.measured.items() if label != served}

    def summary(self) -> str:
        """The refused settings as a start line names them: "bf16 refused: the engine died of
        SIGFPE compiling it; f32 (0.9999999) served"."""
        parts = [f"{label} refused: {reason}" for label, reason in self.failed.items()]
        parts += [f"{label} refused: {value:.7g}" for label, value in self.refused().items()]
        return "; ".join(parts) or "none refused"


def keeps_cosine_bar(precision: str, min_cosine: float) -> bool:
    """A bi-encoder's bar, the same for every precision."""
    return min_cosine >= MIN_COSINE


def choose_setting(
    precisions: Sequence[str],
    measure: Callable[[Setting], Outcome],
    keeps: Callable[[str, float], bool] = keeps_cosine_bar,
) -> SettingChoice:
    """Measures each precision in order, stopping at the first whose measure keeps its bar: a
    precision that misses it is never served, and one that keeps it is not passed over for a
    later one. Within a precision, the next layout (more threads per stream) is tried only
    where the engine failed on the one before: the bar is the precision's, not the layout's."""
    measured: dict[str, float] = {}
    failed: dict[str, str] = {}
    for precision in precisions:
        for threads in THREADS_PER_STREAM:
            setting = Setting(precision, threads)
            outcome = measure(setting)
            if isinstance(outcome, Failure):
                failed[setting.label] = outcome.reason
                continue
            measured[setting.label] = outcome
            if keeps(precision, outcome):
                return SettingChoice(setting, measured, failed)
            break
    return SettingChoice(None, measured, failed)


def replayed_outcome(
    measured: Mapping[str, float], failed: Mapping[str, str]
) -> Callable[[Setting], Outcome]:
    """The measure that gives what a record says each setting gave, to replay its choice."""
    return lambda setting: (
        Failure(failed[setting.label]) if setting.label in failed else measured[setting.label]
    )


def geometric_mean_speed(rates: Mapping[str, float]) -> float:
    """One engine's speed over the timed batches, each length counting alike (the time for
    one of each batch let long texts decide alone)."""
    return math.prod(rates.values()) ** (1.0 / len(rates))


def faster_engine(speeds: Mapping[str, Mapping[str, float]]) -> str:
    """The CPU engine to serve by default from texts/s per thread per engine and batch: ONNX
    Runtime only when it runs ONNX_RUNTIME_MARGIN times OpenVINO's speed or more."""
    onnxruntime = geometric_mean_speed(speeds["onnxruntime"])
    openvino = geometric_mean_speed(speeds["openvino"])
    return "onnxruntime" if onnxruntime >= ONNX_RUNTIME_MARGIN * openvino else "openvino"
