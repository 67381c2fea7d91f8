"""What every OpenVINO export record must say, whichever path this processor took: the
choices it records are the ones export/engine_choice.py makes from the measurements it
records beside them."""

from __future__ import annotations

from typing import Any

from export.engine_choice import (
    MIN_COSINE,
    PrecisionChoice,
    choose_precision,
    faster_engine,
    precision_candidates,
)


def assert_the_recorded_choices_replay(openvino: dict[str, Any]) -> None:
    """The precision served keeps the bar and is the one chosen from the cosines measured (a
    precision that missed the bar, bf16 on some processors, is recorded and not served); the
    engine recorded faster is the one chosen from the speeds measured."""
    measured = openvino["min_cosine"]
    served = openvino["precision"]
    assert measured[served] >= openvino["min_cosine_required"] == MIN_COSINE, measured
    has_bf16 = "BF16" in openvino["processor_capabilities"]
    replayed = choose_precision(precision_candidates(has_bf16), measured.__getitem__)
    assert replayed == PrecisionChoice(served, measured), (replayed, openvino)
    assert faster_engine(openvino["texts_per_s_one_thread"]) == openvino["faster_engine"]


def assert_the_recorded_reranker_choices_replay(openvino: dict[str, Any]) -> None:
    """As for a bi-encoder, with a reranker's measure: each precision's max score difference
    to CrossEncoder.predict against its own bound."""
    measured = openvino["max_score_difference"]
    bounds = openvino["max_score_difference_allowed"]
    served = openvino["precision"]
    assert measured[served] <= bounds[served], openvino
    has_bf16 = "BF16" in openvino["processor_capabilities"]
    replayed = choose_precision(
        precision_candidates(has_bf16),
        measured.__getitem__,
        lambda precision, difference: difference <= bounds[precision],
    )
    assert replayed == PrecisionChoice(served, measured), (replayed, openvino)
    assert faster_engine(openvino["pairs_per_s_one_thread"]) == openvino["faster_engine"]
