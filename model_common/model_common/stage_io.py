"""The check every Python stage runs when it loads: the tensors its code
reads and writes (model_common.tensors) against those its config.pbtxt
declares and, where it runs an exported graph, those the graph takes and
gives. A config edit or an export that breaks the contract then fails the
load, with a message naming the model, each tensor and both sides, instead
of failing every request. Pure Python: the stage raises the message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from model_common.tensors import StageIO, Tensor


@dataclass(frozen=True)
class GraphTensors:
    """A loaded graph's inputs and outputs: numpy type names by tensor name."""

    inputs: Mapping[str, str]
    outputs: Mapping[str, str]


def config_mismatch(model: str, config: Mapping[str, Any], io: StageIO) -> str | None:
    """Why `config` (the model config Triton passes initialize, parsed)
    does not declare what the stage's code reads and writes, or None."""
    problems = []
    if int(config.get("max_batch_size", 0)) <= 0:
        problems.append(
            f"config.pbtxt declares max_batch_size {config.get('max_batch_size', 0)}; "
            "the code reads and writes rows of a batch (max_batch_size > 0)"
        )
    for side, verb, tensors in (("input", "reads", io.inputs), ("output", "writes", io.outputs)):
        problems += _compared(
            side,
            ("config.pbtxt", "declares", _declared(config.get(side, []))),
            ("the code", verb, {tensor.name: _spec(tensor) for tensor in tensors}),
            others_allowed=False,
        )
    return _mismatch(model, "config.pbtxt does not match the stage's code", problems)


def graph_mismatch(
    model: str,
    graph_file: str,
    graph: GraphTensors,
    feeds: Sequence[Tensor],
    reads: Sequence[Tensor],
) -> str | None:
    """Why the graph in `graph_file` does not take exactly the inputs the
    stage feeds it, or lacks an output the stage reads, each in the type of
    the Triton tensor it comes from or goes to; or None."""
    problems = _compared(
        "input",
        (graph_file, "takes", graph.inputs),
        ("the stage", "feeds", {tensor.graph_name: tensor.numpy_type for tensor in feeds}),
        others_allowed=False,
    ) + _compared(
        "output",
        (graph_file, "gives", graph.outputs),
        ("the stage", "reads", {tensor.graph_name: tensor.numpy_type for tensor in reads}),
        others_allowed=True,
    )
    return _mismatch(model, f"{graph_file} does not match the stage", problems)


# Who declares or expects the tensors of one side, the verb it does so by,
# and what it says of each tensor, by name.
Party = tuple[str, str, Mapping[str, str]]


def _compared(side: str, declaring: Party, expecting: Party, others_allowed: bool) -> list[str]:
    """Each tensor the expecting party names that the declaring one lacks
    or declares otherwise, and (unless `others_allowed`) each it declares
    that the expecting one does not name; each problem naming both sides."""
    declarer, declares, declared = declaring
    expecter, expects, expected = expecting
    problems = []
    for name, wanted in expected.items():
        found = declared.get(name)
        if found is None:
            problems.append(
                f"{side} '{name}': {expecter} {expects} {wanted}; {declarer} {declares} no "
                f"such {side} (its {side}s: {_listed(declared)})"
            )
        elif found != wanted:
            problems.append(
                f"{side} '{name}': {declarer} {declares} {found}; {expecter} {expects} {wanted}"
            )
    if not others_allowed:
        problems += [
            f"{side} '{name}': {declarer} {declares} {found}; {expecter} {expects} no such "
            f"{side} (it {expects} {_listed(expected)})"
            for name, found in declared.items()
            if name not in expected
        ]
    return problems


def _spec(tensor: Tensor) -> str:
    return f"{tensor.data_type} {list(tensor.dims)}"


def _declared(entries: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """config.pbtxt's inputs or outputs: each one's data type and dims, by
    name (Triton's JSON may write dims as strings)."""
    return {
        str(entry["name"]): _spec(
            Tensor(
                str(entry["name"]),
                str(entry.get("data_type", "TYPE_INVALID")),
                tuple(int(dim) for dim in entry.get("dims", [])),
            )
        )
        for entry in entries
    }


def _mismatch(model: str, what: str, problems: Sequence[str]) -> str | None:
    return f"model '{model}': {what}: " + "; ".join(problems) if problems else None


def _listed(names: Mapping[str, object]) -> str:
    return ", ".join(names) or "none"
