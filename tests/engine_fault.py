"""What the crash-path tests share: making an engine die of a real signal in the processes they
start (tests/engine_faults/sitecustomize.py), and the settings involved."""

from __future__ import annotations

import pytest

from server.paths import REPO_ROOT

ENGINE_FAULTS = REPO_ROOT / "tests" / "engine_faults"


def with_engine_fault(monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """Every Python process started from here on takes `fault` (sitecustomize's ENGINE_FAULT:
    "SIGFPE:bf16/1,bf16/2", "SIGSEGV:onnxruntime"); Triton's stubs never do."""
    monkeypatch.setenv("PYTHONPATH", str(ENGINE_FAULTS))
    monkeypatch.setenv("ENGINE_FAULT", fault)


def died(signal: str, doing: str) -> str:
    """How the export names an engine killed by `signal` while `doing` ("compiling")."""
    return f"the engine died of {signal} {doing} it"
