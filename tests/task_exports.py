"""What the export tests of every task but the bi-encoder share: one run of
export/export_onnx.py on a folder, its files read where the task's declaration
(embedding_catalog.tasks) puts them, and the check of a refusal: one message
naming what cannot be served, no traceback, nothing written."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import onnxruntime as ort
import pytest
from embedding_catalog.tasks import Task
from tokenizers import Tokenizer

from harness.export_environment import run_in_export_environment
from server.paths import REPO_ROOT

EXPORT_ONNX = REPO_ROOT / "export" / "export_onnx.py"
# How every such task's export.json starts (task_export.Exported.opening_record).
OPENING_KEYS = ["task", "graph", "model_dir", "model_type", "architecture", "modules"]


@dataclass(frozen=True)
class ExportRun:
    """One export: the task, its folder, the repository written, and the run's output."""

    task: Task
    folder: Path
    repository: Path
    returncode: int
    output: str

    @property
    def record(self) -> dict[str, Any]:
        return json.loads((self.repository / self.task.onnx_version / "export.json").read_text())

    def session(self) -> ort.InferenceSession:
        return ort.InferenceSession(
            str(self.repository / self.task.onnx_version / "model.onnx"),
            providers=["CPUExecutionProvider"],
        )

    def tokenizer(self, version: str | None = None) -> Tokenizer:
        """The serving tokenizer.json of `version` (a version folder), else the tokenizer
        stage's."""
        folder = self.task.tokenizer_version if version is None else version
        return Tokenizer.from_file(str(self.repository / folder / "tokenizer.json"))


Run = TypeVar("Run", bound=ExportRun)


def run_export(kind: type[Run], task: Task, folder: Path, repository: Path, *args: str) -> Run:
    """export_onnx.py on `folder` into `repository`, in the export environment."""
    done = run_in_export_environment(
        [str(EXPORT_ONNX), f"--model-dir={folder}", f"--repository={repository}", *args],
        check=False,
    )
    return kind(task, folder, repository, done.returncode, done.stdout + done.stderr)


def export_each(
    kind: type[Run],
    task: Task,
    folders: Mapping[str, Path],
    names: Iterable[str],
    factory: pytest.TempPathFactory,
) -> dict[str, Run]:
    """The export of each named folder, each into a repository of its own."""
    return {
        name: run_export(kind, task, folders[name], factory.mktemp(f"repository_{name}"))
        for name in names
    }


def assert_refused(run: ExportRun, messages: Sequence[str]) -> None:
    """The export failed with one message naming each of `messages`, and wrote nothing."""
    assert run.returncode != 0
    # A refusal is one message, not a traceback.
    assert "Traceback" not in run.output, run.output[-3000:]
    for message in messages:
        assert message in run.output, run.output[-3000:]
    assert not run.repository.exists()
