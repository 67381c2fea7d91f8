"""OpenVINO, imported without its telemetry: every module of this project imports it from here.

Importing openvino imports its model converter, which, where the openvino_telemetry package is
installed (the openvino wheel depends on it), sends an event from a process it forks off a
thread at every import. Forked while another thread held a lock, such a child deadlocked in an
export's engine worker and held the export's output pipe open, so the launcher waiting on that
output waited for ever; and a served stage has no business sending anything. With the package
blocked, the converter falls back to its own no-op telemetry (openvino.tools.ovc's
telemetry_stub)."""

from __future__ import annotations

import sys

# A None entry makes `import openvino_telemetry` raise ImportError, which openvino's converter
# and NNCF both take as "no telemetry".
sys.modules.setdefault("openvino_telemetry", None)

import openvino as ov  # noqa: E402

__all__ = ["ov"]
