"""Exports every catalog model whose export is missing or stale.

A model with a folder of its own is exported into EXPORTS/<name>, laid out
as export/ lays out the model repository (shared/tokenizer/1,
onnx_cpu/embedder/1, openvino_cpu/embedder/1). The export is stale when the
folder's files (their sizes and times), the export code or the engine
changed: their digest is kept beside it. The packaged MiniLM is exported by scripts/setup.sh into
MODEL_REPOSITORY itself. Standard library only.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from server.catalog import CatalogModel
from server.logs import log
from server.paths import (
    ENGINE_FOLDERS,
    EXPORT_PYTHON,
    EXPORTS,
    MODEL_REPOSITORY,
    REPO_ROOT,
    TENSORRT_FOLDER,
    TENSORRT_PLAN,
    faster_cpu_engine,
)

EXPORT_CODE = tuple(sorted((REPO_ROOT / "export").glob("*.py")))
DIGEST_FILE = "source.sha256"
# The lines of a refused export's output that a refusal quotes.
QUOTED_LINES = 3


def export_root(model: CatalogModel) -> Path:
    return MODEL_REPOSITORY if model.path is None else EXPORTS / model.name


def engine_of(model: CatalogModel) -> str:
    """The engine that serves `model`: its own choice, or for auto the
    packaged model's TensorRT engine where this server has it built, else
    the CPU engine its export measured faster."""
    if model.task == "sparse":
        # Exported for ONNX Runtime alone (catalog.TASK_ENGINES).
        return "onnxruntime"
    if model.engine != "auto":
        return model.engine
    if model.path is None and TENSORRT_PLAN.exists():
        return "tensorrt"
    return faster_cpu_engine(export_root(model), model.task)


def engine_folder(model: CatalogModel) -> str:
    engine = engine_of(model)
    return TENSORRT_FOLDER if engine == "tensorrt" else ENGINE_FOLDERS[engine]


def source_digest(model: CatalogModel) -> str:
    """The digest of what an export of `model` is made from: the engine, the
    export code's contents, and each file of the model's folder by path,
    size and modification time, so that a start does not read the weights."""
    assert model.path is not None
    digest = hashlib.sha256(model.engine.encode())
    for path in EXPORT_CODE:
        digest.update(path.name.encode() + path.read_bytes())
    for path in sorted(path for path in model.path.rglob("*") if path.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(model.path)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def _run(step: list[str]) -> str | None:
    """Runs one export step; the tail of its output when it fails."""
    done = subprocess.run(step, cwd=REPO_ROOT, capture_output=True, text=True)
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return " | ".join(lines[-QUOTED_LINES:]) or f"exit status {done.returncode}"


def ensure_exported(model: CatalogModel) -> str | None:
    """Exports `model` unless its export is current; the refusal, naming the
    entry, when it cannot be exported."""
    if model.path is None:
        engine = engine_of(model)
        needed = [MODEL_REPOSITORY / "shared" / "tokenizer" / "1" / "export.json"]
        if engine == "tensorrt":
            needed.append(TENSORRT_PLAN)
        else:
            engines = list(ENGINE_FOLDERS) if model.engine == "auto" else [engine]
            needed += [
                MODEL_REPOSITORY / ENGINE_FOLDERS[e] / "embedder" / "1" / "export.json"
                for e in engines
            ]
        missing = [str(path.relative_to(MODEL_REPOSITORY)) for path in needed if not path.exists()]
        return (
            f"entry {model.name!r}: the packaged model's export is missing ({', '.join(missing)}); "
            "run scripts/setup.sh"
            + (" and export/export_tensorrt.py on the serving GPU" if engine == "tensorrt" else "")
            if missing
            else None
        )
    root = export_root(model)
    stamp = root / DIGEST_FILE
    wanted = source_digest(model)
    if stamp.exists() and stamp.read_text().strip() == wanted:
        return None
    log("catalog", f"exporting {model.name!r} from {model.path}")
    script = str(REPO_ROOT / "export" / "export_onnx.py")
    steps = [[str(EXPORT_PYTHON), script, f"--model-dir={model.path}", f"--repository={root}"]]
    if model.task != "sparse" and model.engine != "onnxruntime":
        openvino = str(REPO_ROOT / "export" / "export_openvino.py")
        steps.append([str(EXPORT_PYTHON), openvino, f"--repository={root}"])
    stamp.unlink(missing_ok=True)
    for step in steps:
        refusal = _run(step)
        if refusal:
            return f"entry {model.name!r} ({model.path}): export refused: {refusal}"
    stamp.write_text(wanted + "\n")
    return None
