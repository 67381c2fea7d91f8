"""A loaded graph's own inputs and outputs, as model_common.stage_io checks
them: from an ONNX Runtime session or an OpenVINO compiled model. Neither
engine is imported here, so a stage loads only the one it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from model_common.stage_io import GraphTensors

if TYPE_CHECKING:
    import onnxruntime as ort
    import openvino as ov

# ONNX Runtime's type strings whose numpy name is not the string's inside.
_ONNXRUNTIME_TYPES = {"tensor(float)": "float32", "tensor(double)": "float64"}


def _onnxruntime_type(type_name: str) -> str:
    return _ONNXRUNTIME_TYPES.get(type_name, type_name.removeprefix("tensor(").removesuffix(")"))


def onnxruntime_tensors(session: ort.InferenceSession) -> GraphTensors:
    return GraphTensors(
        inputs={port.name: _onnxruntime_type(port.type) for port in session.get_inputs()},
        outputs={port.name: _onnxruntime_type(port.type) for port in session.get_outputs()},
    )


def openvino_tensors(compiled: ov.CompiledModel) -> GraphTensors:
    """Each port under each of its names (a stage asks for a port by any)."""
    return GraphTensors(
        inputs={
            name: port.get_element_type().to_dtype().name
            for port in compiled.inputs
            for name in port.get_names()
        },
        outputs={
            name: port.get_element_type().to_dtype().name
            for port in compiled.outputs
            for name in port.get_names()
        },
    )
