"""The launcher's load probe of an OpenVINO stage: compiles the stage's IR as the stage will
(the same setting, threads and model cache) and runs it once, in a process of its own, so an
engine that dies doing so (OpenVINO 2026.4.1 dies of SIGFPE compiling a decoder in bf16 on a
Xeon with AMX) kills this process, not a stub that Triton would then load again and again.

    python -m model_common.openvino_probe MODEL_XML THREADS [PRECISION THREADS_PER_STREAM]

Without a setting it probes the one the stage serves by default (its `auto` parameters against
the export record beside MODEL_XML). Its first line on standard output is the setting probed,
`setting PRECISION THREADS_PER_STREAM`, written before anything can die; it exits 0 once the
compile and the run succeeded. A success is marked in the cache folder, so the next start of
the same export on this machine finds it and returns at once."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from model_common.openvino_compile import PROBED_MARKER, cache_dir, compile_cached
from model_common.openvino_runtime import ov
from model_common.openvino_setting import (
    PRECISION_PARAMETER,
    THREADS_PER_STREAM_PARAMETER,
    served_setting,
)
from model_common.processor import this_processor
from model_common.record import ExportRecord

# The probe's run: a batch of this many rows of this many tokens.
PROBE_SHAPE = (2, 8)


def probe_inputs(compiled: ov.CompiledModel) -> dict[str, np.ndarray]:
    """Zeros for every input (a token id and a segment every model has), ones for the mask."""
    return {
        port.any_name: (np.ones if port.any_name == "attention_mask" else np.zeros)(
            PROBE_SHAPE, np.int64
        )
        for port in compiled.inputs
    }


def warn(message: str) -> None:
    print(message, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> None:
    model_xml, threads, *forced = argv if argv is not None else sys.argv[1:]
    model_xml_path = Path(model_xml)
    parameters = dict(
        zip((PRECISION_PARAMETER, THREADS_PER_STREAM_PARAMETER), forced, strict=False)
    )
    core = ov.Core()
    openvino = dict(ExportRecord.read(model_xml_path.parent).fields.get("openvino") or {})
    setting = served_setting(
        parameters,
        openvino,
        core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"),
        this_processor().cls,
    )
    print(f"setting {setting.precision} {setting.threads_per_stream}", flush=True)
    marker = cache_dir(model_xml_path.resolve(), setting, int(threads)) / PROBED_MARKER
    if marker.exists():
        return
    compiled = compile_cached(core, model_xml_path, setting, int(threads), warn)
    compiled.create_infer_request().infer(probe_inputs(compiled))
    try:
        marker.touch()
    except OSError:
        pass  # no writable cache (compile_cached warned): the next start probes again


if __name__ == "__main__":
    main()
