"""Makes an engine die of a real signal, in the processes of a test that puts this folder on
PYTHONPATH (Python imports a sitecustomize it finds there at start) and names the fault in
ENGINE_FAULT, as OpenVINO 2026.4.1 dies of SIGFPE compiling a decoder in bf16 with one thread
per stream on a Xeon with AMX: the crash path is then taken on every processor.

    ENGINE_FAULT="SIGFPE:bf16/1,bf16/2"   OpenVINO's compile_model dies in those settings
                                          (precision / threads per stream)
    ENGINE_FAULT="SIGSEGV:onnxruntime"    ONNX Runtime dies loading any graph

Triton's Python-backend stubs run Python in isolated mode, which ignores PYTHONPATH: a served
stage never takes the fault, only the export's workers and the launcher's load probes do."""

from __future__ import annotations

import os
import signal

_FAULT = os.environ.get("ENGINE_FAULT")


def _die(name: str) -> None:
    os.kill(os.getpid(), signal.Signals[name])


def _fault_openvino(name: str, settings: set[str]) -> None:
    from model_common.openvino_runtime import ov

    compile_model = ov.Core.compile_model

    def dying(
        self: ov.Core, model: object, device: str = "CPU", config: dict | None = None
    ) -> object:
        options = config or {}
        threads = int(options.get("INFERENCE_NUM_THREADS", 1))
        per_stream = max(1, threads // int(options.get("NUM_STREAMS", 1)))
        if f"{options.get('INFERENCE_PRECISION_HINT')}/{per_stream}" in settings:
            _die(name)
        return compile_model(self, model, device, config)

    ov.Core.compile_model = dying  # type: ignore[method-assign]


def _fault_onnxruntime(name: str) -> None:
    import onnxruntime

    class Dying(onnxruntime.InferenceSession):
        def __init__(self, *arguments: object, **options: object) -> None:
            _die(name)

    onnxruntime.InferenceSession = Dying  # type: ignore[misc]


if _FAULT:
    _signal, _, _where = _FAULT.partition(":")
    if _where == "onnxruntime":
        _fault_onnxruntime(_signal)
    else:
        _fault_openvino(_signal, set(_where.split(",")))
