"""export/engine_choice.py, model_common's served setting and the launcher's probe ladder on
given measurements: every path of the setting and engine choice (bf16 refused, an engine that
dies in a setting, an export checked on another processor class) is taken here on every
processor, not only on the ones whose exports happen to measure it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from model_common.openvino_setting import Setting, precision_candidates, served_setting
from model_common.processor import this_processor

from export.engine_choice import (
    MIN_COSINE,
    ONNX_RUNTIME_MARGIN,
    Failure,
    Outcome,
    SettingChoice,
    choose_setting,
    faster_engine,
)
from server.catalog import CatalogModel
from server.engine_probe import next_setting
from server.engine_report import embedder_line
from server.paths import ENGINE_FOLDERS

DIED = "the engine died of SIGFPE compiling it"


def _measured(outcomes: dict[str, Outcome]) -> tuple[list[str], Callable[[Setting], Outcome]]:
    """A measuring function over given outcomes by setting label, and the labels asked for."""
    asked: list[str] = []

    def measure(setting: Setting) -> Outcome:
        asked.append(setting.label)
        return outcomes[setting.label]

    return asked, measure


def test_bf16_below_the_bar_is_refused_and_float32_served() -> None:
    """As the random-weight Qwen3 measured on a bf16 Xeon: bf16 0.99968, f32 1.0. A precision
    that misses the bar is not tried with more threads per stream: the bar is the
    precision's."""
    asked, measure = _measured({"bf16": 0.9997, "f32": 1.0})
    choice = choose_setting(precision_candidates(has_bf16=True), measure)
    assert choice == SettingChoice(Setting("f32"), {"bf16": 0.9997, "f32": 1.0}, {})
    assert choice.refused() == {"bf16": 0.9997}
    assert asked == ["bf16", "f32"]


def test_bf16_at_the_bar_is_served_without_measuring_float32() -> None:
    asked, measure = _measured({"bf16": MIN_COSINE, "f32": 1.0})
    choice = choose_setting(precision_candidates(has_bf16=True), measure)
    assert choice == SettingChoice(Setting("bf16"), {"bf16": MIN_COSINE}, {})
    assert choice.refused() == {}
    assert asked == ["bf16"]


def test_without_bfloat16_only_float32_is_measured() -> None:
    assert precision_candidates(has_bf16=False) == ("f32",)
    asked, measure = _measured({"f32": 0.99999})
    assert choose_setting(precision_candidates(has_bf16=False), measure).served == Setting("f32")
    assert asked == ["f32"]


def test_nothing_is_served_when_no_precision_keeps_the_bar() -> None:
    _, measure = _measured({"bf16": 0.99, "f32": 0.9998})
    choice = choose_setting(precision_candidates(has_bf16=True), measure)
    assert choice == SettingChoice(None, {"bf16": 0.99, "f32": 0.9998}, {})


def test_an_engine_that_dies_with_one_thread_per_stream_is_tried_with_two() -> None:
    """As OpenVINO 2026.4.1 on a Xeon with AMX: bf16 dies compiling a decoder with one thread
    per stream and compiles with two; kept at the bar, that setting is served."""
    two = Setting("bf16", 2).label
    asked, measure = _measured({"bf16": Failure(DIED), two: 0.99995})
    choice = choose_setting(precision_candidates(has_bf16=True), measure)
    assert choice == SettingChoice(Setting("bf16", 2), {two: 0.99995}, {"bf16": DIED})
    assert choice.summary() == f"bf16 refused: {DIED}"
    assert asked == ["bf16", two]


def test_a_precision_whose_engine_dies_in_every_layout_gives_way_to_the_next() -> None:
    two = Setting("bf16", 2).label
    asked, measure = _measured({"bf16": Failure(DIED), two: Failure(DIED), "f32": 1.0})
    choice = choose_setting(precision_candidates(has_bf16=True), measure)
    assert choice == SettingChoice(Setting("f32"), {"f32": 1.0}, {"bf16": DIED, two: DIED})
    assert asked == ["bf16", two, "f32"]


def test_nothing_is_served_where_the_engine_dies_in_every_setting() -> None:
    two = Setting("f32", 2).label
    _, measure = _measured({"f32": Failure(DIED), two: Failure(DIED)})
    choice = choose_setting(precision_candidates(has_bf16=False), measure)
    assert choice == SettingChoice(None, {}, {"f32": DIED, two: DIED})


def test_the_served_setting_is_the_exports_only_on_the_class_it_was_checked_on() -> None:
    """auto serves bf16 where the export kept its bar in bf16 on this class of processor;
    exported on another class, f32; a forced precision or layout is served as asked."""
    here = this_processor().cls
    record = {"precision": "bf16", "threads_per_stream": 2, "processor_class": here}
    with_bf16 = ["BF16", "FP32"]
    assert served_setting({}, record, with_bf16, here) == Setting("bf16", 2)
    assert served_setting({}, {**record, "processor_class": "other"}, with_bf16, here) == Setting(
        "f32"
    )
    assert served_setting({}, record, ["FP32"], here) == Setting("f32")
    forced = {"precision": "f32", "threads_per_stream": "2"}
    assert served_setting(forced, record, with_bf16, here) == Setting("f32", 2)
    assert served_setting({"precision": "bf16"}, record, with_bf16, "other") == Setting("bf16", 2)
    with pytest.raises(ValueError, match="this processor has no bfloat16"):
        served_setting({"precision": "bf16"}, record, ["FP32"], here)
    with pytest.raises(ValueError, match="'threads_per_stream' is '3'"):
        served_setting({"threads_per_stream": "3"}, record, with_bf16, here)


def test_the_load_probe_tries_more_threads_then_the_next_precision() -> None:
    assert next_setting(Setting("bf16")) == Setting("bf16", 2)
    assert next_setting(Setting("bf16", 2)) == Setting("f32")
    assert next_setting(Setting("f32")) == Setting("f32", 2)
    assert next_setting(Setting("f32", 2)) is None


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


def test_the_launcher_line_names_the_refused_settings(tmp_path: Path) -> None:
    """The record a random-weight Qwen3 export writes where bf16 dies and f32 keeps the bar,
    as the launcher logs it at start."""
    record = tmp_path / ENGINE_FOLDERS["openvino"] / "embedder" / "1" / "export.json"
    record.parent.mkdir(parents=True)
    two = Setting("bf16", 2).label
    openvino = {
        "precision": "f32",
        "threads_per_stream": 1,
        "processor_class": this_processor().cls,
        "min_cosine_required": MIN_COSINE,
        "min_cosine": {"f32": 0.99999994},
        "failed": {"bf16": DIED, two: DIED},
        "texts_per_s_per_thread": {
            "onnxruntime": {"query-8": 900.0, "short-8": 400.0},
            "openvino": {"query-8": 1000.0, "short-8": 420.0},
        },
        "faster_engine": "openvino",
    }
    record.write_text(json.dumps({"openvino": openvino}))
    model = CatalogModel("qwen3-random", tmp_path, engine="openvino")
    expected = (
        f"qwen3-random: engine openvino, precision f32 (the catalog); min cosine to "
        f"sentence-transformers bf16 refused: {DIED}, {two} refused: {DIED}, "
        "f32 0.9999999 (served); bar 0.9999"
    )
    assert embedder_line(model, "openvino", tmp_path) == expected
    elsewhere = {**openvino, "precision": "bf16", "processor_class": "other"}
    elsewhere["min_cosine"] = {"bf16": 0.99995}
    record.write_text(json.dumps({"openvino": elsewhere}))
    assert "precision f32 (the catalog)" in embedder_line(model, "openvino", tmp_path)
    line = embedder_line(model, "openvino", tmp_path)
    assert "bf16 was checked on a processor of class other, not on this one" in line
