"""The seam between the export's order of steps and a task: what differs per task is declared
once, as a TaskExport in the task's module (embed_export.py, rerank_export.py,
sparse_export.py), beside the catalog's declaration of the task (embedding_catalog.tasks: the
sentence-transformers class its folder is loaded as and checked against, where its files go).
export_onnx.py runs the steps in order for any of them; export_openvino.py loads a task's model
the same way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from embedding_catalog.tasks import Task
from model_folder import FolderSpec
from onnx_graph import Graph, GraphBuild
from optimize_graph import GraphKind
from publish import library_versions
from served_tokenizer import load_tokenizer
from st_model import load_checked
from tokenizers import Tokenizer

Spec = TypeVar("Spec", bound=FolderSpec)
Model = TypeVar("Model")
G = TypeVar("G", bound=Graph)
Check = TypeVar("Check")


class Checked(Protocol):
    """What a task's check found, as its record says it."""

    def record(self) -> dict[str, object]: ...


Result = TypeVar("Result", bound=Checked)


@dataclass(frozen=True)
class Loaded(Generic[Spec, Model]):
    """A task's folder read, its model loaded and checked, and its tokenizer as served."""

    spec: Spec
    model: Model
    tokenizer: Tokenizer


@dataclass(frozen=True)
class Exported(Generic[Spec, G, Result]):
    """A graph traced and checked: what the task's record and printed line are made of."""

    task: Task
    spec: Spec
    graph: G
    result: Result
    build: GraphBuild
    opset: int

    def opening_line(self) -> str:
        """How the line printed for a task but the bi-encoder starts: "exported task=rerank
        bert (BertForSequenceClassification) graph=plain"."""
        spec = self.spec
        return (
            f"exported task={self.task.name} {spec.model_type} ({spec.architecture}) "
            f"graph={self.build.kind}"
        )

    def opening_record(self) -> dict[str, object]:
        """How the export.json of a task but the bi-encoder (whose record names no task)
        starts: the same facts as its line's start, and the folder and its modules."""
        spec = self.spec
        return {
            "task": self.task.name,
            "graph": self.build.kind,
            "model_dir": str(spec.model_dir),
            "model_type": spec.model_type,
            "architecture": spec.architecture,
            "modules": list(spec.modules),
        }

    def closing_record(self) -> dict[str, object]:
        """How every task's export.json ends: the opset, the check's results and the versions
        of the libraries that made and checked the export."""
        return {"opset": self.opset, **self.result.record(), "versions": library_versions()}


@dataclass(frozen=True)
class TaskExport(Generic[Spec, Model, G, Check, Result]):
    """One task's export: how its folder is read and its model checked to be the one read, its
    graph and what it is traced on, the check set (built before the export, so that a tokenizer
    that differs from the model's own refuses it at once) and the check against the model, the
    record and the line printed, and the graph kinds (--graph) it allows."""

    task: Task
    read_spec: Callable[[Path], Spec]
    identity: Callable[[Spec, Model], None]  # refuses a loaded model the spec does not describe
    graph: Callable[[Spec, Model], G]
    # Two texts (or pairs) the graph is traced on, the second longer: a padded row keeps the
    # attention-mask path in the trace, which an all-ones mask may let the encoder skip.
    examples: Sequence[str | tuple[str, str]]
    check_set: Callable[[Loaded[Spec, Model], G], Check]
    check: Callable[[Path, Loaded[Spec, Model], Check, GraphKind], Result]
    record: Callable[[Exported[Spec, G, Result]], dict[str, Any]]
    line: Callable[[Exported[Spec, G, Result]], str]
    graph_kinds: tuple[GraphKind, ...] = ("plain",)
    # The lowest ONNX opset its graph's operators exist in; an unasked export takes the later of
    # it and the default.
    opset: int | None = None

    def load(self, model_dir: Path) -> Loaded[Spec, Model]:
        """Reads the folder, loads its model as the task's class and checks it is the one read."""
        spec = self.read_spec(model_dir)
        model = load_checked(spec, self.task.model_type, self.identity)
        return Loaded(spec, model, load_tokenizer(spec.transformer_dir, spec.max_seq_length))


def file_check(
    check: Callable[[Path, Check], Result],
) -> Callable[[Path, Loaded[Any, Any], Check, GraphKind], Result]:
    """A TaskExport's check from one that needs only the graph's file and the check set (the
    bi-encoder's needs its model and the graph kind too)."""
    return lambda onnx_path, _, check_set, __: check(onnx_path, check_set)
