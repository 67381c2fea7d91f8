"""Convert an exported ONNX graph to OpenVINO IR for its task's OpenVINO stage.

Reads what export/export_onnx.py wrote (a bi-encoder's <repository>/onnx_cpu/embedder/1/,
a reranker's <repository>/reranker/scorer/1/: model.onnx and its export.json), converts the
graph to IR (float32 weights), and checks it in the precision it will be served in against
sentence-transformers on the original weights, with the task's own check: a bi-encoder's
(embed_openvino.py) min cosine >= 0.9999 over reference_check.py's check texts, a reranker's
(rerank_openvino.py) scores within its precision's bound of CrossEncoder.predict. The weights
folder is the one the ONNX record names unless --model-dir says otherwise. bfloat16 is checked
first where the processor runs it; if it misses the bar, the export says so and records float32,
which the server then serves. Each setting compiles and runs in a process of its own
(openvino_ir.py): where the engine dies or fails there, that setting is refused, naming how
("bf16 refused: the engine died of SIGFPE compiling it"), and the next is tried: the same
precision with two threads per stream, then the next precision. Then it times ONNX Runtime
float32 against OpenVINO in the setting served on the same batches, per thread, and records
which to serve (faster_engine): the launcher serves that engine by default. The record names the
processor class it was checked on. On success it writes, each file atomically, into the task's
OpenVINO version folder (embedding_catalog.tasks: openvino_cpu/embedder/1/ for a bi-encoder,
the scorer's own for a reranker):

    model.xml, model.bin
    export.json   (the ONNX record, plus "openvino")

A task without an OpenVINO stage (a sparse encoder) is exported for ONNX Runtime only: a
repository holding its export, or its weights folder, is refused with a message saying so; so is
a weights folder of another task than the repository's export.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from embed_openvino import embedder_check
from embedding_catalog.tasks import EMBED, RERANK, TASKS, Task
from export_onnx import TASK_EXPORTS, export_parser
from model_folder import default_model_dir, read_json, read_task
from openvino_ir import IrCheck, export_ir, ir_record
from publish import write_record
from rerank_openvino import scorer_check
from task_export import Loaded

# Each task's IR check, from its loaded model and its ONNX record; the tasks with an OpenVINO
# stage (a Task's openvino_version) have one.
IR_CHECKS: Mapping[str, Callable[[Loaded[Any, Any], Mapping[str, Any]], IrCheck]] = (
    MappingProxyType({EMBED.name: embedder_check, RERANK.name: scorer_check})
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = export_parser(
        __doc__.splitlines()[0],
        "the model_dir the ONNX export's export.json names",
        "the ONNX export and its IR",
    )
    return parser.parse_args(argv)


def exported_task(repository: Path) -> Task:
    """The task whose ONNX export the repository holds, the first in the catalog's order where
    it holds several; a bi-encoder's where it holds none (its missing record is then named)."""
    for task in TASKS.values():
        if (repository / task.onnx_version / "export.json").exists():
            return task
    return EMBED


def a(kind: str) -> str:
    """The kind with its indefinite article: "a reranker", "an embedding model"."""
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def onnx_runtime_only(task: Task) -> str:
    """Why a task without an OpenVINO stage has no IR."""
    converted = " and ".join(f"{other.kind}s" for other in TASKS.values() if other.openvino_version)
    return (
        f"{task.kind}s are exported for ONNX Runtime only, export_openvino.py converts {converted}"
    )


def refuse_onnx_runtime_only(repository: Path, task: Task) -> None:
    if task.openvino_version is None:
        record = repository / task.onnx_version / "export.json"
        raise SystemExit(
            f"{repository} holds {a(task.kind)}'s export ({record}); {onnx_runtime_only(task)}"
        )


def checked_model_dir(
    repository: Path, task: Task, onnx_record: Mapping[str, Any], given: Path | None
) -> Path:
    """The ONNX graph's own weights folder (a repository exported from another model than the
    packaged one checks against that model), refused unless it holds the repository's task."""
    recorded = onnx_record.get("model_dir")
    model_dir = (given or (Path(recorded) if recorded else default_model_dir())).resolve()
    held = read_task(model_dir)
    if held.name == task.name:
        return model_dir
    holds = f"{model_dir} holds {a(held.kind)} ({held.model_type})"
    if held.openvino_version is None:
        raise SystemExit(f"{holds}; {onnx_runtime_only(held)}")
    raise SystemExit(
        f"{holds}, but {repository} holds no {held.kind} export "
        f"({repository / held.onnx_version}): export it with export_onnx.py first"
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    repository = args.repository.resolve()
    task = exported_task(repository)
    refuse_onnx_runtime_only(repository, task)
    onnx_dir = repository / task.onnx_version
    onnx_record: dict[str, Any] = read_json(onnx_dir / "export.json")
    model_dir = checked_model_dir(repository, task, onnx_record, args.model_dir)
    check = IR_CHECKS[task.name](TASK_EXPORTS[task.name].load(model_dir), onnx_record)
    target = repository / str(task.openvino_version)
    export = export_ir(onnx_dir / "model.onnx", target, check)
    write_record(target / "export.json", {**onnx_record, "openvino": ir_record(export, check)})
    print(
        f"exported {check.title}, setting {export.served.label} ({export.choice.summary()}), "
        f"faster engine: {export.faster} -> {target}"
    )


if __name__ == "__main__":
    main()
