"""Compiling an exported graph's OpenVINO IR for a Python-backend stage (the
OpenVINO embedder, a reranker's scorer on OpenVINO): the precision served and
the model cache a restart loads from; importable only inside a Triton
Python-backend stub."""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import openvino as ov
import triton_python_backend_utils as pb_utils

from model_common.embedder_setup import EmbedderSetup

PRECISIONS = ("auto", "bf16", "f32")


def cache_dir(model_xml: Path, precision: str, streams: int) -> Path:
    """Where OpenVINO keeps compiled models, so a restart loads instead of
    compiling again. OpenVINO keys a blob by the model file's path, not its
    content or all compile options: each export of the IR (its files' sizes
    and times) and each setting gets its own folder, so a new export or a
    bf16 load never reuses an older or f32 blob."""
    stats = [path.stat() for path in (model_xml, model_xml.with_suffix(".bin"))]
    stamp = "".join(f"{stat.st_size}:{stat.st_mtime_ns};" for stat in stats)
    export = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "triton-embedding" / "openvino" / f"{export}-{precision}-{streams}streams"


def compile_cached(
    core: ov.Core, model_xml: Path, precision: str, streams: int
) -> ov.CompiledModel:
    """Compiles `model_xml` for the CPU through the model cache. The file's
    real path is compiled, so repository copies that link the shipped IR share
    one blob; a lock on the folder lets one process (another instance or
    server) write a blob while the others wait, then load it, instead of
    writing the same file at once and failing."""
    options = {
        "INFERENCE_PRECISION_HINT": precision,
        "NUM_STREAMS": streams,
        "INFERENCE_NUM_THREADS": streams,
        # Each instance is its own process, and OpenVINO pins every process's
        # first stream to the same core: two instances running one group
        # each would share that core while the other idled
        # (perf/results/debian12-2core/batching_choices.md, "No CPU pinning").
        "ENABLE_CPU_PINNING": False,
    }
    model_xml = model_xml.resolve()
    model_path = str(model_xml)
    cache = cache_dir(model_xml, precision, streams)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        lock = (cache / ".lock").open("a")
    except OSError as error:
        pb_utils.Logger.log_warn(f"no OpenVINO model cache ({error}); compiling")
        return core.compile_model(model_path, "CPU", options)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return core.compile_model(model_path, "CPU", {**options, "CACHE_DIR": str(cache)})


def served_precision(wanted: str, exported: str, capabilities: Sequence[str]) -> str:
    """The inference precision to compile for. `auto` takes what the export
    checked against sentence-transformers (bf16 only if it kept its bar), on a processor that runs bfloat16."""
    if wanted not in PRECISIONS:
        raise ValueError(f"parameter 'precision' is {wanted!r}; expected one of {PRECISIONS}")
    if wanted == "bf16" and "BF16" not in capabilities:
        raise ValueError("parameter 'precision' is 'bf16', but this processor has no bfloat16")
    if wanted == "auto":
        return "bf16" if exported == "bf16" and "BF16" in capabilities else "f32"
    return wanted


def compile_served(
    core: ov.Core, setup: EmbedderSetup, streams: int
) -> tuple[ov.CompiledModel, str]:
    """The stage's IR (its version folder's model.xml) compiled through the
    cache in the precision served: its `precision` parameter against what
    its export record checked; and that precision."""
    exported = str(dict(setup.record.fields.get("openvino") or {}).get("precision", "f32"))
    precision = served_precision(
        setup.parameters["precision"],
        exported,
        core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"),
    )
    return compile_cached(core, setup.version_dir / "model.xml", precision, streams), precision
