"""What every OpenVINO export shares (export_openvino.py; a task's check is its own:
embed_openvino.py for a bi-encoder, rerank_openvino.py for a reranker): converting the ONNX
graph to IR, checking each setting (model_common.openvino_setting) in a process of its own as
the task's check asks, timing the one served against ONNX Runtime, publishing the IR, and the
record of those choices. A task declares what differs (IrCheck); the order of the steps is
here."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from engine_choice import Failure, Outcome, SettingChoice, choose_setting, faster_engine
from isolated_graph import EngineFailed, IsolatedGraph
from model_common.openvino_runtime import ov
from model_common.openvino_setting import Setting, precision_candidates
from model_common.processor import this_processor
from publish import write_atomically

TIMING_SECONDS = 1.0
TIMING_ROUNDS = 2
IR_FILES = ("model.xml", "model.bin")

Feeds = dict[str, np.ndarray]


@dataclass(frozen=True)
class IrCheck:
    """What a task's IR export measures: a setting's measure from its graph (a bi-encoder's min
    cosine, a reranker's max score difference), whether it keeps its precision's bar, the line
    that reports it, the batches timed (their rows are the first input's rows), and how the
    record names the measures and the bars."""

    measure: Callable[[IsolatedGraph], float]
    keeps: Callable[[str, float], bool]
    report: Callable[[Setting, float], str]
    timing: Mapping[str, Feeds]
    unit: str  # what a row is: "texts", "pairs"
    measure_name: str  # the record's key of each setting's measure: "min_cosine"
    bars: Mapping[str, object]  # the record's bars: {"min_cosine_required": 0.9999}
    title: str  # what the line printed at the end calls the export


@dataclass(frozen=True)
class IrExport:
    choice: SettingChoice
    served: Setting
    speeds: dict[str, dict[str, float]]  # rows/s per thread, by engine and batch
    faster: str


def convert(onnx_path: Path, workdir: Path) -> Path:
    """The graph as IR with float32 weights in workdir; the IR's model.xml."""
    model_xml = workdir / "model.xml"
    ov.save_model(ov.convert_model(str(onnx_path)), str(model_xml), compress_to_fp16=False)
    return model_xml


def capabilities() -> list[str]:
    return list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def open_setting(model_xml: Path, setting: Setting) -> IsolatedGraph:
    """The IR compiled in `setting` as one stream, in a process of its own."""
    graph = IsolatedGraph("openvino", model_xml, setting.options(setting.threads_per_stream))
    return graph.open()


def measure_settings(
    model_xml: Path, precisions: Sequence[str], check: IrCheck
) -> tuple[SettingChoice, IsolatedGraph | None]:
    """Each setting tried in its own process until one keeps its bar; the choice, and the
    served setting's graph, still open, for timing."""
    graphs: list[IsolatedGraph] = []

    def measure(setting: Setting) -> Outcome:
        try:
            graphs.append(open_setting(model_xml, setting))
            value = check.measure(graphs[-1])
        except EngineFailed as failure:
            print(f"check: {setting.label} refused: {failure}")
            return Failure(str(failure))
        print(check.report(setting, value))
        return value

    try:
        choice = choose_setting(precisions, measure, check.keeps)
    finally:
        kept = graphs.pop() if graphs else None
        for graph in graphs:
            graph.close()
    if choice.served is None and kept is not None:
        kept.close()
        kept = None
    return choice, kept


def engine_speeds(
    rates: Mapping[str, Callable[[Feeds], float]], batches: Mapping[str, Feeds]
) -> dict[str, dict[str, float]]:
    """Rows/s of each engine on each batch, alternating rounds so drift on a shared machine
    hits both alike; the best round counts."""
    speeds: dict[str, dict[str, float]] = {name: {} for name in rates}
    for _ in range(TIMING_ROUNDS):
        for name, rate in rates.items():
            for batch_name, batch in batches.items():
                speeds[name][batch_name] = max(rate(batch), speeds[name].get(batch_name, 0.0))
    return speeds


def time_engines(
    onnx_path: Path, served: IsolatedGraph, setting: Setting, batches: Mapping[str, Feeds]
) -> dict[str, dict[str, float]]:
    """Rows/s per thread of ONNX Runtime (one thread) and of OpenVINO in the served setting
    (one stream), each timed in its own process."""

    def rows(feeds: Feeds) -> int:
        return int(next(iter(feeds.values())).shape[0])

    with IsolatedGraph("onnxruntime", onnx_path, {"threads": 1}).open() as session:
        return engine_speeds(
            {
                "onnxruntime": lambda feeds: session.rate(feeds, rows(feeds), TIMING_SECONDS),
                "openvino": lambda feeds: (
                    served.rate(feeds, rows(feeds), TIMING_SECONDS) / setting.threads_per_stream
                ),
            },
            batches,
        )


def publish_ir(model_xml: Path, target: Path) -> None:
    """Copies the IR's files into the version folder `target`, each atomically."""
    for name in IR_FILES:
        write_atomically(
            target / name,
            lambda temp, name=name: shutil.copyfile(model_xml.parent / name, temp),
        )


def export_ir(onnx_path: Path, target: Path, check: IrCheck) -> IrExport:
    """Converts `onnx_path`, checks each setting, times the one served and publishes its IR
    into `target`; refuses the export where no setting keeps its bar."""
    has_bf16 = "BF16" in capabilities()
    with tempfile.TemporaryDirectory(prefix="export_openvino_") as workdir:
        model_xml = convert(onnx_path, Path(workdir))
        choice, served = measure_settings(model_xml, precision_candidates(has_bf16), check)
        if served is None or choice.served is None:
            raise SystemExit(
                f"no OpenVINO setting kept its bar ({choice.summary()}); nothing was written"
            )
        if not has_bf16:
            print("check: this processor has no bfloat16; float32 is served")
        try:
            with served:
                speeds = time_engines(onnx_path, served, choice.served, check.timing)
        except EngineFailed as failure:
            raise SystemExit(
                f"timing {choice.served.label}: {failure}; nothing was written"
            ) from None
        for name, rates in speeds.items():
            print(
                f"timing: {name} "
                + ", ".join(f"{batch} {rate:.1f} {check.unit}/s" for batch, rate in rates.items())
                + " per thread"
            )
        publish_ir(model_xml, target)
    return IrExport(choice, choice.served, speeds, faster_engine(speeds))


def ir_record(export: IrExport, check: IrCheck) -> dict[str, object]:
    """What an OpenVINO export records of its choices, and the task's own measures."""
    return {
        **export.served.record(),
        "failed": export.choice.failed,
        "processor_capabilities": capabilities(),
        "processor_class": this_processor().cls,
        "version": ov.get_version(),
        f"{check.unit}_per_s_per_thread": export.speeds,
        "faster_engine": export.faster,
        **check.bars,
        check.measure_name: export.choice.measured,
    }
