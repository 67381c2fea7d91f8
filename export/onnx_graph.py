"""Tracing the graph module (a bi-encoder's, a reranker's or a sparse encoder's head) to one ONNX
file, then fusing and quantizing it as --graph asks (export/optimize_graph.py)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import onnx
import torch
from embedding_head import EmbeddingGraph
from optimize_graph import GraphKind, attention_shape, fuse, quantize_int8
from rerank_head import RerankGraph
from served_tokenizer import pad_batch, pad_inputs
from sparse_head import SparseGraph
from tokenizers import Tokenizer

Graph = EmbeddingGraph | RerankGraph | SparseGraph


@dataclass(frozen=True)
class GraphBuild:
    """Which graph was written, and the fusions and quantization that made it."""

    kind: GraphKind
    fusions: dict[str, int]
    quantization: dict[str, str | bool] | None


def example_inputs(tokenizer: Tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """Builds tracing inputs of batch 2 with one padded row."""
    # A padded row keeps the attention-mask path in the trace; an all-ones mask may let
    # the encoder skip it.
    encodings = tokenizer.encode_batch(
        ["An example.", "A somewhat longer example sentence for tracing."]
    )
    input_ids, attention_mask = pad_batch(encodings)
    return torch.from_numpy(input_ids), torch.from_numpy(attention_mask)


def example_pair_inputs(tokenizer: Tokenizer, names: tuple[str, ...]) -> tuple[torch.Tensor, ...]:
    """Builds a reranker's tracing inputs, in the order of names: two pairs, one padded."""
    encodings = tokenizer.encode_batch(
        [("A query", "An example."), ("A query", "A somewhat longer example document for tracing.")]
    )
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
    """Exports the graph, then fuses and quantizes it as `kind` asks; returns the file to check.
    model_dir is the Transformer module's folder (its config.json)."""
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
        return fused_path, GraphBuild("fused", fusions, None)
    int8_path = workdir / "int8.onnx"
    quantization = quantize_int8(fused_path, int8_path)
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
