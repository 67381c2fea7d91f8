"""Tracing a task's graph module (a bi-encoder's, a reranker's or a sparse encoder's head) to one
ONNX file, then fusing and quantizing it as --graph asks (export/optimize_graph.py), and checking
the file written."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import onnx
import torch
from optimize_graph import GraphKind, attention_shape, fuse, quantize_int8
from served_tokenizer import pad_inputs
from tokenizers import Tokenizer

# Texts a graph of single texts is traced on.
TEXT_EXAMPLES = ("An example.", "A somewhat longer example sentence for tracing.")


class Graph(Protocol):
    """What every task's graph module is: a torch module with its ONNX inputs and outputs named,
    holding the transformers model as `encoder`."""

    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    encoder: torch.nn.Module

    def eval(self) -> torch.nn.Module: ...


@dataclass(frozen=True)
class GraphBuild:
    """Which graph was written, and the fusions and quantization that made it."""

    kind: GraphKind
    fusions: dict[str, int]
    quantization: dict[str, str | bool] | None


def example_inputs(
    tokenizer: Tokenizer, examples: Sequence[str | tuple[str, str]], names: Sequence[str]
) -> tuple[torch.Tensor, ...]:
    """The tracing inputs, in the order of names: the examples tokenized as served, padded as
    the server pads."""
    encodings = tokenizer.encode_batch(list(examples))
    return tuple(torch.from_numpy(array) for array in pad_inputs(encodings, names).values())


def export_graph(graph: Graph, inputs: tuple[torch.Tensor, ...], path: Path, opset: int) -> None:
    """Exports the graph with the TorchScript exporter, batch and sequence dynamic."""
    dynamic_axes = {name: {0: "batch", 1: "sequence"} for name in graph.input_names} | {
        name: {0: "batch"} for name in graph.output_names
    }
    with warnings.catch_warnings(), torch.no_grad():
        # The tracer warns about Python branches inside transformers; the self-check runs other
        # batch and sequence shapes than the trace, which is what those warnings are about.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        torch.onnx.export(
            graph.eval(),
            inputs,
            str(path),
            dynamo=False,
            input_names=list(graph.input_names),
            output_names=list(graph.output_names),
            dynamic_axes=dynamic_axes,
            opset_version=opset,
            do_constant_folding=True,
        )


def build_graph(
    graph: Graph,
    inputs: tuple[torch.Tensor, ...],
    workdir: Path,
    opset: int,
    kind: GraphKind,
    model_dir: Path,
) -> tuple[Path, GraphBuild]:
    """Exports the graph, then fuses and quantizes it as `kind` asks; returns the file written,
    checked (check_onnx_file). model_dir is the Transformer module's folder (its config.json)."""
    if kind != "plain":
        # ONNX Runtime's attention fusion recognizes the eager attention pattern only.
        graph.encoder.set_attn_implementation("eager")
    plain_path = workdir / "plain.onnx"
    export_graph(graph, inputs, plain_path, opset)
    check_onnx_file(plain_path)
    if kind == "plain":
        return plain_path, GraphBuild("plain", {}, None)
    fused_path = workdir / "fused.onnx"
    fusions = fuse(plain_path, fused_path, attention_shape(model_dir))
    if kind == "fused":
        check_onnx_file(fused_path)
        return fused_path, GraphBuild("fused", fusions, None)
    int8_path = workdir / "int8.onnx"
    quantization = quantize_int8(fused_path, int8_path)
    check_onnx_file(int8_path)
    return int8_path, GraphBuild("int8", fusions, quantization)


def check_onnx_file(path: Path) -> None:
    """Validates the ONNX file and that it carries its weights inside (single file)."""
    onnx.checker.check_model(str(path))
    model = onnx.load(str(path), load_external_data=False)
    external = [
        tensor.name
        for tensor in model.graph.initializer
        if tensor.data_location == onnx.TensorProto.EXTERNAL
    ]
    if external:
        raise SystemExit(
            f"{path}: {len(external)} initializers are stored as external data, expected one file"
        )
