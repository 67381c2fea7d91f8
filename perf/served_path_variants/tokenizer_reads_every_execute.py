"""The shipped tokenizer stage as it admitted before its shared counts: it
reads the embedder's backlog from Triton's metrics at every execute. Only
perf.served_path serves it, linked in place of the shipped model.py, to
measure the before and after in one run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# Linked into a repository variant: the shipped model is found from this
# file's own place in the project.
SHIPPED = Path(__file__).resolve().parents[2] / "model_repository" / "shared" / "tokenizer" / "1"
_spec = importlib.util.spec_from_file_location("shipped_tokenizer", SHIPPED / "model.py")
assert _spec is not None and _spec.loader is not None
_shipped = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shipped)


class TritonPythonModel(_shipped.TritonPythonModel):  # type: ignore[misc, name-defined]
    def initialize(self, args: dict[str, str]) -> None:
        super().initialize(args)
        self._door._gate.max_age_s = 0.0
