"""What the OpenVINO exports share (export_openvino.py for a bi-encoder, rerank_openvino.py for a
reranker): converting the ONNX graph to IR, compiling it as one of the server's streams runs,
timing it against ONNX Runtime on the same batches, and publishing the IR."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import onnxruntime as ort
import openvino as ov
from publish import write_atomically

TIMING_SECONDS = 1.0
TIMING_ROUNDS = 2
IR_FILES = ("model.xml", "model.bin")

Batch = TypeVar("Batch")


def convert(onnx_path: Path, workdir: Path) -> Path:
    """The graph as IR with float32 weights in workdir; the IR's model.xml."""
    model_xml = workdir / "model.xml"
    ov.save_model(ov.convert_model(str(onnx_path)), str(model_xml), compress_to_fp16=False)
    return model_xml


def compile_for(core: ov.Core, model_xml: Path, precision: str) -> ov.CompiledModel:
    """One stream of one thread, as each of the server's streams runs."""
    return core.compile_model(
        str(model_xml),
        "CPU",
        {"INFERENCE_PRECISION_HINT": precision, "NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": 1},
    )


def has_bfloat16(core: ov.Core) -> bool:
    return "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def one_thread_session(onnx_path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])


def rows_per_s(run: Callable[[Batch], object], batch: Batch, rows: int) -> float:
    run(batch)  # the first run allocates
    done, start, elapsed = 0, time.perf_counter(), 0.0
    while elapsed < TIMING_SECONDS:
        run(batch)
        done += rows
        elapsed = time.perf_counter() - start
    return done / elapsed


def engine_speeds(
    engines: Mapping[str, Callable[[Batch], object]],
    batches: Mapping[str, Batch],
    rows: Callable[[Batch], int],
) -> dict[str, dict[str, float]]:
    """Rows/s of each engine on each batch, alternating rounds so drift on a shared machine
    hits both alike; the best round counts."""
    speeds: dict[str, dict[str, float]] = {name: {} for name in engines}
    for _ in range(TIMING_ROUNDS):
        for name, run in engines.items():
            for batch_name, batch in batches.items():
                rate = rows_per_s(run, batch, rows(batch))
                speeds[name][batch_name] = max(rate, speeds[name].get(batch_name, 0.0))
    return speeds


def publish_ir(model_xml: Path, target: Path) -> None:
    """Copies the IR's files into the version folder `target`, each atomically."""
    for name in IR_FILES:
        write_atomically(
            target / name,
            lambda temp, name=name: shutil.copyfile(model_xml.parent / name, temp),
        )
