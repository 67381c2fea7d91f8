"""The line the launcher logs per catalog model at start: the engine and precision it serves,
and the measurements on this machine that chose them (export/engine_choice.py), so that a
log says why a bf16 processor serves a model in float32, or ONNX Runtime instead of
OpenVINO: a precision that missed its bar, an engine that died checking it, an export checked
on another class of processor, a setting the load probe found dies here
(server/engine_probe.py). It reads the records the export wrote. Standard library and
model_common's processor class only, like the launcher."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embedding_catalog.tasks import EMBED, M3, RERANK, SPARSE, VERSION
from model_common.openvino_setting import Setting, exported_setting
from model_common.processor import this_processor

from server.catalog import CatalogModel
from server.catalog_exports import engine_of, export_root

ENGINE_NAMES = {"onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}


def stage_record(root: Path, stage: str) -> dict[str, Any]:
    """The export record of a model_repository stage folder, as exported under root."""
    path = root / stage / VERSION / "export.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _served_label(openvino: dict[str, Any]) -> str:
    return exported_setting(openvino).label


def _measures(openvino: dict[str, Any], key: str, shown: Callable[[float], str]) -> str:
    """Each setting the export tried: the engines that failed, then each measure, served or
    refused."""
    served = _served_label(openvino)
    failed = [f"{label} refused: {why}" for label, why in openvino.get("failed", {}).items()]
    measured = [
        f"{label} {shown(value)} ({'served' if label == served else 'refused'})"
        for label, value in openvino[key].items()
    ]
    return ", ".join(failed + measured)


def _speeds(openvino: dict[str, Any], unit: str) -> str:
    """Both engines' rates per thread, as the export timed them to choose."""
    settings = {"onnxruntime": "f32", "openvino": _served_label(openvino)}
    return "; ".join(
        f"{ENGINE_NAMES[engine]} {settings[engine]} "
        + ", ".join(f"{batch} {rate:.0f}" for batch, rate in rates.items())
        for engine, rates in openvino[f"{unit}_per_s_per_thread"].items()
    )


def _elsewhere(openvino: dict[str, Any]) -> str:
    """Where the export's precision was checked on another class of processor than this one,
    the note saying bf16 is not served here (model_common.openvino_setting.served_setting)."""
    checked_on = openvino.get("processor_class")
    if checked_on == this_processor().cls or openvino.get("precision") != "bf16":
        return ""
    return (
        f"; bf16 was checked on a processor of class {checked_on}, not on this one "
        f"({this_processor().cls}): f32 served; export again here to check bf16"
    )


def _served_setting(model: CatalogModel, openvino: dict[str, Any]) -> str:
    """The setting served: the probe's where it moved off the export's, else the export's
    (f32 where bf16 was checked elsewhere)."""
    if model.openvino_setting is not None:
        return Setting(*model.openvino_setting).label
    if _elsewhere(openvino):
        return "f32"
    return _served_label(openvino)


def _probed(model: CatalogModel) -> str:
    return f"; {model.probe_note}" if model.probe_note else ""


def _auto(model: CatalogModel) -> bool:
    """Whether the engine was left to auto: the load probe serves ONNX Runtime in place of
    OpenVINO only for such an entry (server/engine_probe.py)."""
    return model.engine == "auto" or (
        model.probe_note is not None and model.engine == "onnxruntime"
    )


def _rerank_line(model: CatalogModel, engine: str, root: Path) -> str:
    """A reranker's scorer: its engine and precision, and its scores' checks against
    CrossEncoder.predict (export/score_check.py, export/rerank_openvino.py)."""
    record = stage_record(root, RERANK.engine_stage("openvino"))
    openvino = record.get("openvino")
    chosen_by = "auto" if _auto(model) else "the catalog"
    line = f"{model.name}: reranker, engine {engine}"
    if engine == "openvino" and openvino is not None:
        served = openvino["precision"]
        line += (
            f", precision {_served_setting(model, openvino)} ({chosen_by}), activation "
            f"{record.get('activation')}; max score difference to CrossEncoder "
            f"{openvino['max_score_difference'][served]} (bound "
            f"{openvino['max_score_difference_allowed'][served]}){_elsewhere(openvino)}"
        )
    else:
        line += (
            f", precision f32 ({chosen_by}), activation {record.get('activation')}; max score "
            f"difference to CrossEncoder {record.get('max_score_difference')} over "
            f"{record.get('num_check_pairs')} pairs (bar "
            f"{record.get('max_score_difference_allowed')})"
        )
    if openvino is not None and _auto(model):
        measured = _measures(openvino, "max_score_difference", lambda value: f"{value:.2e}")
        line += f"; OpenVINO checked {measured}; pairs/s per thread: {_speeds(openvino, 'pairs')}"
    return line + _probed(model)


def _sparse_line(name: str, root: Path) -> str:
    """A sparse encoder's encoder: ONNX Runtime in float32, checked against
    SparseEncoder.encode."""
    record = stage_record(root, SPARSE.engine_stage("onnxruntime"))
    return (
        f"{name}: sparse encoder, engine onnxruntime, precision f32, pooling "
        f"{record.get('pooling_strategy')}; max value difference to SparseEncoder "
        f"{record.get('max_value_difference')} over {record.get('num_check_texts')} texts "
        f"(bar {record.get('max_value_difference_allowed')})"
    )


def _m3_line(name: str, root: Path) -> str:
    """A BGE-M3 model's encoder: ONNX Runtime in float32, each output checked against
    BGEM3FlagModel.encode."""
    record = stage_record(root, M3.engine_stage("onnxruntime"))
    differences = ", ".join(
        f"{output} {record.get(f'max_{output}_difference')}"
        for output in ("dense", "sparse", "colbert")
    )
    return (
        f"{name}: BGE-M3 encoder, engine onnxruntime, precision f32; max difference to "
        f"BGEM3FlagModel {differences} over {record.get('num_check_texts')} texts (bar "
        f"{record.get('max_difference_allowed')})"
    )


def engine_line(model: CatalogModel) -> str:
    """The start line of a catalog model as the launcher serves it."""
    if model.task == "rerank":
        return _rerank_line(model, engine_of(model), export_root(model))
    if model.task == "sparse":
        return _sparse_line(model.name, export_root(model))
    if model.task == M3.name:
        return _m3_line(model.name, export_root(model))
    return embedder_line(model, engine_of(model), export_root(model))


def embedder_line(model: CatalogModel, engine: str, root: Path) -> str:
    """The line for a bi-encoder served on `engine`, from the export records under `root`
    (laid out as export/ writes them)."""
    chosen_by = "auto" if _auto(model) else "the catalog"
    if engine == "tensorrt":
        return f"{model.name}: engine tensorrt ({chosen_by}: its engine is built on this GPU)"
    openvino = stage_record(root, EMBED.engine_stage("openvino")).get("openvino")
    if engine == "openvino" and openvino is not None:
        cosines = _measures(openvino, "min_cosine", lambda cosine: f"{cosine:.7f}")
        line = (
            f"{model.name}: engine openvino, precision {_served_setting(model, openvino)} "
            f"({chosen_by}); min cosine to sentence-transformers {cosines}; "
            f"bar {openvino['min_cosine_required']}{_elsewhere(openvino)}"
        )
    else:
        onnx = stage_record(root, EMBED.engine_stage("onnxruntime"))
        line = (
            f"{model.name}: engine onnxruntime, precision f32, graph {onnx.get('graph')} "
            f"({chosen_by}); min cosine to sentence-transformers {onnx.get('min_cosine')}; "
            f"bar {onnx.get('min_cosine_required')}"
        )
    if openvino is not None and _auto(model):
        line += f"; texts/s per thread: {_speeds(openvino, 'texts')}"
    return line + _probed(model)
