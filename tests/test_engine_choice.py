"""export/engine_choice.py on given measurements: every path of the precision and engine
choice, bf16 refused included, is taken here on every processor, not only on the ones whose
exports happen to measure it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from export.engine_choice import (
    MIN_COSINE,
    ONNX_RUNTIME_MARGIN,
    PrecisionChoice,
    choose_precision,
    faster_engine,
    precision_candidates,
)
from server.engine_report import served_engine_line
from server.paths import ENGINE_FOLDERS


def _measured(cosines: dict[str, float]) -> tuple[list[str], Callable[[str], float]]:
    """A measuring function over given cosines, and the precisions it was asked for."""
    asked: list[str] = []

    def measure(precision: str) -> float:
        asked.append(precision)
        return cosines[precision]

    return asked, measure


def test_bf16_below_the_bar_is_refused_and_float32_served() -> None:
    """As the random-weight Qwen3 measured on a bf16 Xeon: bf16 0.99968, f32 1.0."""
    asked, measure = _measured({"bf16": 0.9997, "f32": 1.0})
    choice = choose_precision(precision_candidates(has_bf16=True), measure)
    assert choice == PrecisionChoice("f32", {"bf16": 0.9997, "f32": 1.0})
    assert choice.refused() == {"bf16": 0.9997}
    assert asked == ["bf16", "f32"]


def test_bf16_at_the_bar_is_served_without_measuring_float32() -> None:
    asked, measure = _measured({"bf16": MIN_COSINE, "f32": 1.0})
    choice = choose_precision(precision_candidates(has_bf16=True), measure)
    assert choice == PrecisionChoice("bf16", {"bf16": MIN_COSINE})
    assert choice.refused() == {}
    assert asked == ["bf16"]


def test_without_bfloat16_only_float32_is_measured() -> None:
    assert precision_candidates(has_bf16=False) == ("f32",)
    asked, measure = _measured({"f32": 0.99999})
    assert choose_precision(precision_candidates(has_bf16=False), measure).served == "f32"
    assert asked == ["f32"]


def test_nothing_is_served_when_no_precision_keeps_the_bar() -> None:
    _, measure = _measured({"bf16": 0.99, "f32": 0.9998})
    choice = choose_precision(precision_candidates(has_bf16=True), measure)
    assert choice == PrecisionChoice(None, {"bf16": 0.99, "f32": 0.9998})


@pytest.mark.parametrize(
    ("onnxruntime_over_openvino", "expected"),
    [
        (ONNX_RUNTIME_MARGIN * 1.01, "onnxruntime"),
        (ONNX_RUNTIME_MARGIN * 0.99, "openvino"),
        (0.6, "openvino"),
    ],
)
def test_onnx_runtime_serves_only_past_its_margin(
    onnxruntime_over_openvino: float, expected: str
) -> None:
    openvino = {"query-8": 800.0, "short-8": 300.0, "long-8": 40.0}
    onnxruntime = {batch: rate * onnxruntime_over_openvino for batch, rate in openvino.items()}
    assert faster_engine({"onnxruntime": onnxruntime, "openvino": openvino}) == expected


def test_each_length_counts_alike_in_the_engine_speed() -> None:
    """ONNX Runtime twice as fast on long texts but half as fast on queries is no faster."""
    openvino = {"query-8": 800.0, "long-8": 40.0}
    onnxruntime = {"query-8": 400.0, "long-8": 80.0}
    assert faster_engine({"onnxruntime": onnxruntime, "openvino": openvino}) == "openvino"


def test_the_launcher_line_names_the_refused_precision(tmp_path: Path) -> None:
    """The record the random-weight Qwen3 export wrote on a bf16 Xeon, as the launcher logs
    it at start."""
    record = tmp_path / ENGINE_FOLDERS["openvino"] / "embedder" / "1" / "export.json"
    record.parent.mkdir(parents=True)
    openvino = {
        "precision": "f32",
        "min_cosine_required": MIN_COSINE,
        "min_cosine": {"bf16": 0.99968106, "f32": 0.99999994},
        "texts_per_s_one_thread": {
            "onnxruntime": {"query-8": 900.0, "short-8": 400.0},
            "openvino": {"query-8": 1000.0, "short-8": 420.0},
        },
        "faster_engine": "openvino",
    }
    record.write_text(json.dumps({"openvino": openvino}))
    line = served_engine_line("qwen3-random", "openvino", True, tmp_path)
    assert line == (
        "qwen3-random: engine openvino, precision f32 (auto); min cosine to "
        "sentence-transformers bf16 0.9996811 (refused), f32 0.9999999 (served); bar 0.9999; "
        "texts/s on one thread: ONNX Runtime f32 query-8 900, short-8 400; "
        "OpenVINO f32 query-8 1000, short-8 420"
    )
