"""Exports every catalog model whose export is missing or stale.

A model with a folder of its own is exported into EXPORTS/<name>, laid out
as export/ lays out the model repository (shared/tokenizer/1,
onnx_cpu/embedder/1, openvino_cpu/embedder/1). The export is stale when the
folder's files (their sizes and times), the export code, the engine or the
processor class changed: their digest is kept beside it. A precision is
served only where it was checked on this class of processor (bfloat16
rounds differently on AMX than on AVX-512, and the engines fail on some
classes alone), so another class exports again. The packaged MiniLM is exported by scripts/setup.sh into
MODEL_REPOSITORY itself. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

from model_common.exit_status import ending
from model_common.processor import this_processor

from server.catalog import CatalogModel
from server.logs import log
from server.paths import (
    ENGINE_FOLDERS,
    EXPORT_PYTHON,
    EXPORTS,
    MODEL_REPOSITORY,
    REPO_ROOT,
    TENSORRT_PLAN,
    faster_cpu_engine,
)

# What an export runs: its own code, the settings and rows it checks, which
# the stages serve too, and the task declarations that say where its files go.
EXPORT_CODE = (
    *sorted((REPO_ROOT / "export").glob("*.py")),
    *(
        REPO_ROOT / "model_common" / "model_common" / name
        for name in ("openvino_setting.py", "multivector.py", "token_pooling.py")
    ),
    REPO_ROOT / "catalog" / "embedding_catalog" / "tasks.py",
)
DIGEST_FILE = "source.sha256"
# Which Hub model and commit a Hub entry's export was made from, for people:
# the digest above is what keys it.
HUB_RECORD = "hub.json"
# An export's progress bars, captured, would only bury the line that says
# why it failed.
QUIET_EXPORT = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def export_root(model: CatalogModel) -> Path:
    return MODEL_REPOSITORY if model.path is None else EXPORTS / model.name


def engine_of(model: CatalogModel) -> str:
    """The engine that serves `model`: its own choice, or for auto the
    packaged model's TensorRT engine where this server has it built, else
    the CPU engine its export measured faster (ONNX Runtime for a task
    exported for it alone)."""
    if model.engine != "auto":
        return model.engine
    if model.path is None and TENSORRT_PLAN.exists():
        return "tensorrt"
    return faster_cpu_engine(export_root(model), model.task)


def source_digest(model: CatalogModel) -> str:
    """The digest of what an export of `model` is made from: the engine, the
    processor class, the export code's contents, and the model: a Hub
    model's commit (its snapshot folder's name), or each file of a folder by
    path, size and modification time, so that a start does not read the
    weights."""
    assert model.path is not None
    digest = hashlib.sha256(f"{model.engine}:{this_processor().cls}".encode())
    for path in EXPORT_CODE:
        digest.update(path.name.encode() + path.read_bytes())
    if model.hub is not None:
        digest.update(f"hub:{model.hub.repo_id}@{model.path.name}".encode())
        return digest.hexdigest()
    for path in sorted(path for path in model.path.rglob("*") if path.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(model.path)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def _run(step: list[str]) -> str | None:
    """Runs one export step; why it failed, if it did: its last line (an export's refusal is
    its last line), and how it ended where a signal killed it."""
    done = subprocess.run(
        step,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **QUIET_EXPORT},
    )
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    last = lines[-1].strip() if lines else ""
    if done.returncode < 0 or not last:
        return f"{Path(step[1]).name} {ending(done.returncode)}" + (
            f" after: {last}" if last else ""
        )
    return last


def ensure_exported(model: CatalogModel) -> str | None:
    """Exports `model` unless its export is current; the refusal, naming the
    entry, when it cannot be exported."""
    if model.path is None:
        return _packaged_export_missing(model)
    root = export_root(model)
    stamp = root / DIGEST_FILE
    wanted = source_digest(model)
    if stamp.exists() and stamp.read_text().strip() == wanted:
        return None
    source = (
        model.path if model.hub is None else f"hub {model.hub.repo_id!r} commit {model.path.name}"
    )
    log("catalog", f"exporting {model.name!r} from {source}")
    started = time.monotonic()
    stamp.unlink(missing_ok=True)
    script = str(REPO_ROOT / "export" / "export_onnx.py")
    refusal = _run(
        [str(EXPORT_PYTHON), script, f"--model-dir={model.path}", f"--repository={root}"]
    )
    has_openvino = model.task_declaration.openvino_version is not None
    if refusal is None and has_openvino and model.engine != "onnxruntime":
        refusal = _export_openvino(model, root)
    if refusal:
        return f"entry {model.name!r} ({source}): export refused: {refusal}"
    stamp.write_text(wanted + "\n")
    if model.hub is not None:
        record = {**asdict(model.hub), "commit": model.path.name}
        (root / HUB_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    log("catalog", f"exported {model.name!r} in {time.monotonic() - started:.0f} s")
    return None


def _export_openvino(model: CatalogModel, root: Path) -> str | None:
    """The IR of the graph just exported; where no OpenVINO setting holds and the entry
    leaves the engine to auto, ONNX Runtime serves, and the launcher says why."""
    # An IR of the graph this export replaced must never be served: without
    # its model.xml, no engine choice picks OpenVINO (paths.faster_cpu_engine).
    (root / str(model.task_declaration.openvino_version) / "model.xml").unlink(missing_ok=True)
    script = str(REPO_ROOT / "export" / "export_openvino.py")
    log("catalog", f"{model.name}: converting its ONNX export to OpenVINO IR, timing both engines")
    refusal = _run([str(EXPORT_PYTHON), script, f"--repository={root}"])
    if refusal is None or model.engine != "auto":
        return refusal
    log(
        "catalog",
        f"{model.name}: no OpenVINO export ({refusal}); serving onnxruntime",
        level="warning",
    )
    return None


def _packaged_export_missing(model: CatalogModel) -> str | None:
    """scripts/setup.sh exports the packaged model: what of it is missing, if anything."""
    engine = engine_of(model)
    needed = [MODEL_REPOSITORY / "shared" / "tokenizer" / "1" / "export.json"]
    if engine == "tensorrt":
        needed.append(TENSORRT_PLAN)
    else:
        engines = list(ENGINE_FOLDERS) if model.engine == "auto" else [engine]
        needed += [
            MODEL_REPOSITORY / ENGINE_FOLDERS[e] / "embedder" / "1" / "export.json" for e in engines
        ]
    missing = [str(path.relative_to(MODEL_REPOSITORY)) for path in needed if not path.exists()]
    if not missing:
        return None
    gpu = " and export/export_tensorrt.py on the serving GPU" if engine == "tensorrt" else ""
    return (
        f"entry {model.name!r}: the packaged model's export is missing ({', '.join(missing)}); "
        f"run scripts/setup.sh{gpu}"
    )
