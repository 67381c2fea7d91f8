"""What every OpenVINO export record must say, whichever path this processor took: the
choices it records are the ones export/engine_choice.py makes from the measurements it
records beside them, on the processor class it names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from model_common.openvino_setting import exported_setting, precision_candidates
from model_common.processor import this_processor

from export.engine_choice import (
    MIN_COSINE,
    SettingChoice,
    choose_setting,
    faster_engine,
    replayed_outcome,
)


def _assert_replays(
    openvino: dict[str, Any], key: str, keeps: Callable[[str, float], bool], unit: str
) -> None:
    measured = openvino[key]
    served = exported_setting(openvino)
    assert keeps(served.precision, measured[served.label]), openvino
    has_bf16 = "BF16" in openvino["processor_capabilities"]
    replayed = choose_setting(
        precision_candidates(has_bf16), replayed_outcome(measured, openvino["failed"]), keeps
    )
    assert replayed == SettingChoice(served, measured, openvino["failed"]), (replayed, openvino)
    assert faster_engine(openvino[f"{unit}_per_s_per_thread"]) == openvino["faster_engine"]
    assert openvino["processor_class"] == this_processor().cls, openvino


def assert_the_recorded_choices_replay(openvino: dict[str, Any]) -> None:
    """The setting served keeps the bar and is the one chosen from the cosines measured (a
    precision that missed the bar, bf16 on some processors, is recorded and not served; a
    setting whose engine failed is recorded with how); the engine recorded faster is the one
    chosen from the speeds measured."""
    assert openvino["min_cosine_required"] == MIN_COSINE
    _assert_replays(openvino, "min_cosine", lambda precision, cosine: cosine >= MIN_COSINE, "texts")


def assert_the_recorded_reranker_choices_replay(openvino: dict[str, Any]) -> None:
    """As for a bi-encoder, with a reranker's measure: each precision's max score difference
    to CrossEncoder.predict against its own bound."""
    bounds = openvino["max_score_difference_allowed"]
    _assert_replays(
        openvino,
        "max_score_difference",
        lambda precision, difference: difference <= bounds[precision],
        "pairs",
    )
