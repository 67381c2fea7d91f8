"""Compiling an exported graph's OpenVINO IR as a stage serves it (the
OpenVINO embedder, a reranker's scorer on OpenVINO): the setting served and
the model cache a restart loads from. The stages and the launcher's load
probe (model_common.openvino_probe) compile through here, so the probe's
compile is the one the stages then load."""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from model_common.embedder_setup import EmbedderSetup
from model_common.openvino_runtime import ov
from model_common.openvino_setting import Setting, served_setting
from model_common.processor import this_processor

# Written into a cache folder once a compile and a run in it succeeded in a
# process of its own, so that a later start need not probe it again.
PROBED_MARKER = "probed"


@dataclass(frozen=True)
class ServedGraph:
    compiled: ov.CompiledModel
    setting: Setting
    streams: int


def cache_dir(model_xml: Path, setting: Setting, threads: int) -> Path:
    """Where OpenVINO keeps compiled models, so a restart loads instead of
    compiling again. OpenVINO keys a blob by the model file's path, not its
    content or all compile options: each export of the IR (its files' sizes
    and times), each setting and each processor class gets its own folder,
    so a new export, a bf16 load or another machine sharing the folder never
    reuses an older, f32 or foreign blob."""
    stats = [path.stat() for path in (model_xml, model_xml.with_suffix(".bin"))]
    stamp = "".join(f"{stat.st_size}:{stat.st_mtime_ns};" for stat in stats)
    export = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    layout = f"{setting.precision}-{setting.threads_per_stream}x{setting.streams(threads)}"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return (
        Path(base) / "triton-embedding" / "openvino" / f"{export}-{layout}-{this_processor().cls}"
    )


def compile_cached(
    core: ov.Core,
    model_xml: Path,
    setting: Setting,
    threads: int,
    warn: Callable[[str], None],
) -> ov.CompiledModel:
    """Compiles `model_xml` for the CPU through the model cache. The file's
    real path is compiled, so repository copies that link the shipped IR share
    one blob; a lock on the folder lets one process (another instance or
    server) write a blob while the others wait, then load it, instead of
    writing the same file at once and failing."""
    options = setting.options(threads)
    model_xml = model_xml.resolve()
    model_path = str(model_xml)
    cache = cache_dir(model_xml, setting, threads)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        lock = (cache / ".lock").open("a")
    except OSError as error:
        warn(f"no OpenVINO model cache ({error}); compiling")
        return core.compile_model(model_path, "CPU", options)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return core.compile_model(model_path, "CPU", {**options, "CACHE_DIR": str(cache)})


def compile_served(
    core: ov.Core, setup: EmbedderSetup, threads: int, warn: Callable[[str], None]
) -> ServedGraph:
    """The stage's IR (its version folder's model.xml) compiled through the
    cache in the setting served (its parameters against its export record),
    for `threads` threads."""
    openvino = dict(setup.record.fields.get("openvino") or {})
    setting = served_setting(
        setup.parameters,
        openvino,
        core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"),
        this_processor().cls,
    )
    compiled = compile_cached(core, setup.version_dir / "model.xml", setting, threads, warn)
    return ServedGraph(compiled, setting, setting.streams(threads))
