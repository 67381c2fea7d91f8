"""The launcher's load probe: before a catalog model is served on OpenVINO, its IR is compiled
and run once as its stage will run it, in a process of its own
(model_common/model_common/openvino_probe.py). Where the engine dies there, the next setting
is probed (two threads per stream, then the next precision), and the model is served in the
first that holds, or on ONNX Runtime where none does and the catalog left the engine to auto;
the launcher logs one line saying so. A stage whose engine died at load would otherwise be
loaded again and again: OpenVINO 2026.4.1 dies of SIGFPE compiling a decoder in bf16 on a Xeon
with AMX, whichever machine the export was checked on (docs/performance.md, "When the engine
dies"). Standard library only, like the launcher."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from model_common.exit_status import ending
from model_common.openvino_setting import PRECISIONS, THREADS_PER_STREAM, Setting

from server.catalog import CatalogModel
from server.catalog_exports import engine_of, export_root
from server.config_text import parameter_value
from server.logs import log
from server.paths import MODEL_REPOSITORY

PROBE_MODULE = "model_common.openvino_probe"


@dataclass(frozen=True)
class Probed:
    """What one probe found: the setting it probed, and how the engine failed, if it did."""

    setting: Setting
    failure: str | None


def next_setting(setting: Setting) -> Setting | None:
    """The setting tried after `setting` died: more threads per stream, then the next
    precision's first layout; None after the last."""
    layouts = THREADS_PER_STREAM
    if setting.threads_per_stream != layouts[-1]:
        return Setting(setting.precision, layouts[layouts.index(setting.threads_per_stream) + 1])
    later = PRECISIONS[PRECISIONS.index(setting.precision) + 1 :]
    return Setting(later[0], layouts[0]) if later else None


def probe(model_xml: Path, threads: int, setting: Setting | None) -> Probed | str:
    """Compiles and runs `model_xml` in `setting` (None: the stage's default) in a process of
    its own; what it found, or why it could not say which setting it probed."""
    forced = [] if setting is None else [setting.precision, str(setting.threads_per_stream)]
    done = subprocess.run(
        [sys.executable, "-m", PROBE_MODULE, str(model_xml), str(threads), *forced],
        capture_output=True,
        text=True,
    )
    first = (done.stdout.splitlines() or [""])[0].split()
    if len(first) != 3 or first[0] != "setting":
        tail = (done.stderr.strip().splitlines() or [ending(done.returncode)])[-1]
        return f"the OpenVINO load probe of {model_xml} failed before it began: {tail}"
    probed = Setting(first[1], int(first[2]))
    if done.returncode == 0:
        return Probed(probed, None)
    tail = done.stderr.strip().splitlines()
    cause = f": {tail[-1]}" if done.returncode > 0 and tail else ""
    return Probed(probed, f"the engine {ending(done.returncode)} compiling or running it{cause}")


def stage_threads(model: CatalogModel) -> int:
    """The threads the model's OpenVINO stage asks for, as its shipped config gives them."""
    task = model.task_declaration
    folder, key = MODEL_REPOSITORY / task.engine_stage("openvino"), task.threads_parameter
    value = parameter_value((folder / "config.pbtxt").read_text(), key)
    if value is None:
        raise ValueError(f"{folder / 'config.pbtxt'} declares no parameter {key!r}")
    return int(value)


def probed(model: CatalogModel) -> CatalogModel | str:
    """`model` as served after its load probe: as it is where the engine holds in the
    export's setting, else with the setting or the engine that holds and the line saying why;
    the refusal, naming the entry, where no OpenVINO setting holds and its engine is forced."""
    if engine_of(model) != "openvino":
        return model
    model_xml = export_root(model) / str(model.task_declaration.openvino_version) / "model.xml"
    threads, setting, failures = stage_threads(model), None, []
    while True:
        found = probe(model_xml, threads, setting)
        if isinstance(found, str):
            return f"entry {model.name!r}: {found}"
        if found.failure is None:
            break
        failures.append(f"{found.setting.label} refused: {found.failure}")
        setting = next_setting(found.setting)
        if setting is None:
            return _without_openvino(model, failures)
    if not failures:
        return model
    note = f"{'; '.join(failures)} on this processor; serving {found.setting.label}"
    log("launcher", f"{model.name}: {note}", level="warning")
    return replace(
        model,
        openvino_setting=(found.setting.precision, found.setting.threads_per_stream),
        probe_note=note,
    )


def _without_openvino(model: CatalogModel, failures: list[str]) -> CatalogModel | str:
    reasons = "; ".join(failures)
    if model.engine != "auto":
        return (
            f"entry {model.name!r}: engine 'openvino', but no OpenVINO setting loads on this "
            f'processor ({reasons}); set engine = "auto" or "onnxruntime"'
        )
    note = f"{reasons} on this processor; serving onnxruntime"
    log("launcher", f"{model.name}: {note}", level="warning")
    return replace(model, engine="onnxruntime", probe_note=note)
