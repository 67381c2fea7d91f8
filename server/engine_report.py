"""The line the launcher logs per catalog model at start: the engine and precision it serves,
and the measurements on this machine that chose them (export/engine_choice.py), so that a
log says why a bf16 processor serves a model in float32, or ONNX Runtime instead of
OpenVINO. It reads the records the export wrote. Standard library only, like the launcher."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from server.catalog import CatalogModel
from server.catalog_exports import engine_of, export_root
from server.paths import (
    ENGINE_FOLDERS,
    MODEL_REPOSITORY,
    RERANKER_REPOSITORY,
    SPARSE_REPOSITORY,
)

ENGINE_NAMES = {"onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}


def _record(root: Path, engine: str) -> dict[str, Any] | None:
    path = root / ENGINE_FOLDERS[engine] / "embedder" / "1" / "export.json"
    return json.loads(path.read_text()) if path.exists() else None


def _openvino_cosines(openvino: dict[str, Any]) -> str:
    served = openvino["precision"]
    return ", ".join(
        f"{precision} {cosine:.7f} ({'served' if precision == served else 'refused'})"
        for precision, cosine in openvino["min_cosine"].items()
    )


def _speeds(openvino: dict[str, Any]) -> str:
    """Both engines' one-thread rates, as the export timed them to choose."""
    precisions = {"onnxruntime": "f32", "openvino": openvino["precision"]}
    return "; ".join(
        f"{ENGINE_NAMES[engine]} {precisions[engine]} "
        + ", ".join(f"{batch} {rate:.0f}" for batch, rate in rates.items())
        for engine, rates in openvino["texts_per_s_one_thread"].items()
    )


def _stage_record(root: Path, stage: Path) -> dict[str, Any]:
    """The export record of a model_repository stage folder, as exported under root."""
    path = root / stage.relative_to(MODEL_REPOSITORY) / "1" / "export.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _rerank_line(model: CatalogModel, engine: str, root: Path) -> str:
    """A reranker's scorer: its engine and precision, and its scores' checks against
    CrossEncoder.predict (export/score_check.py, export/rerank_openvino.py)."""
    record = _stage_record(root, RERANKER_REPOSITORY / "scorer")
    openvino = record.get("openvino")
    chosen_by = "auto" if model.engine == "auto" else "the catalog"
    line = f"{model.name}: reranker, engine {engine}"
    if engine == "openvino" and openvino is not None:
        served = openvino["precision"]
        line += (
            f", precision {served} ({chosen_by}), activation {record.get('activation')}; max "
            f"score difference to CrossEncoder {openvino['max_score_difference'][served]} "
            f"(bound {openvino['max_score_difference_allowed'][served]})"
        )
    else:
        line += (
            f", precision f32 ({chosen_by}), activation {record.get('activation')}; max score "
            f"difference to CrossEncoder {record.get('max_score_difference')} over "
            f"{record.get('num_check_pairs')} pairs (bar "
            f"{record.get('max_score_difference_allowed')})"
        )
    if openvino is not None and model.engine == "auto":
        measured = ", ".join(
            f"{p} {value:.2e}" for p, value in openvino["max_score_difference"].items()
        )
        rates = "; ".join(
            f"{ENGINE_NAMES[name]} "
            + ", ".join(f"{batch} {rate:.0f}" for batch, rate in speeds.items())
            for name, speeds in openvino["pairs_per_s_one_thread"].items()
        )
        line += f"; OpenVINO checked {measured}; pairs/s on one thread: {rates}"
    return line


def _sparse_line(name: str, root: Path) -> str:
    """A sparse encoder's encoder: ONNX Runtime in float32, checked against
    SparseEncoder.encode."""
    record = _stage_record(root, SPARSE_REPOSITORY / "encoder")
    return (
        f"{name}: sparse encoder, engine onnxruntime, precision f32, pooling "
        f"{record.get('pooling_strategy')}; max value difference to SparseEncoder "
        f"{record.get('max_value_difference')} over {record.get('num_check_texts')} texts "
        f"(bar {record.get('max_value_difference_allowed')})"
    )


def engine_line(model: CatalogModel) -> str:
    if model.task == "rerank":
        return _rerank_line(model, engine_of(model), export_root(model))
    if model.task == "sparse":
        return _sparse_line(model.name, export_root(model))
    return served_engine_line(
        model.name, engine_of(model), model.engine == "auto", export_root(model)
    )


def served_engine_line(name: str, engine: str, auto: bool, root: Path) -> str:
    """The line for model `name` served on `engine`, chosen by auto or by its catalog entry,
    from the export records under `root` (laid out as export/ writes them)."""
    chosen_by = "auto" if auto else "the catalog"
    if engine == "tensorrt":
        return f"{name}: engine tensorrt ({chosen_by}: its engine is built on this GPU)"
    openvino = (_record(root, "openvino") or {}).get("openvino")
    if engine == "openvino" and openvino is not None:
        line = (
            f"{name}: engine openvino, precision {openvino['precision']} ({chosen_by}); "
            f"min cosine to sentence-transformers {_openvino_cosines(openvino)}; "
            f"bar {openvino['min_cosine_required']}"
        )
    else:
        onnx = _record(root, "onnxruntime") or {}
        line = (
            f"{name}: engine onnxruntime, precision f32, graph {onnx.get('graph')} "
            f"({chosen_by}); min cosine to sentence-transformers {onnx.get('min_cosine')}; "
            f"bar {onnx.get('min_cosine_required')}"
        )
    if openvino is not None and auto:
        line += f"; texts/s on one thread: {_speeds(openvino)}"
    return line
