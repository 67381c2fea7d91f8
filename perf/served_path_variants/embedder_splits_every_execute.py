"""The shipped OpenVINO embedder as it ran before the instances' busy flags:
every execute call's rows split across its streams, whether or not the
other instances were executing. Only perf.served_path serves it, linked in
place of the shipped model.py, to measure the before and after in one run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import triton_python_backend_utils as pb_utils

# Linked into a repository variant: the shipped model is found from this
# file's own place in the project.
SHIPPED = Path(__file__).resolve().parents[2] / "model_repository" / "openvino_cpu" / "embedder"
_spec = importlib.util.spec_from_file_location("shipped_embedder", SHIPPED / "1" / "model.py")
assert _spec is not None and _spec.loader is not None
_shipped = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shipped)


class TritonPythonModel(_shipped.TritonPythonModel):  # type: ignore[misc, name-defined]
    def execute(
        self, requests: list[pb_utils.InferenceRequest]
    ) -> list[pb_utils.InferenceResponse]:
        self._parallel = self._streams
        return super(_shipped.TritonPythonModel, self).execute(requests)
