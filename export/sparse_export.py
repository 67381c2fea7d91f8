"""The sparse encoder's export, declared (task_export.TaskExport): a SparseEncoder folder
(sparse_folder.py) whose masked language model and SpladePooling must load as the folder says,
its activations graph (sparse_head.py), the plain graph only, checked against
SparseEncoder.encode (sparse_check.py), its record and its line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from embedding_catalog.tasks import SPARSE
from onnx_graph import TEXT_EXAMPLES
from sparse_check import (
    SparseCheckResult,
    SparseCheckSet,
    build_sparse_check_set,
    sparse_check,
)
from sparse_folder import SparseSpec, read_sparse_spec
from sparse_head import SparseGraph
from st_model import hf_encoder
from task_export import Exported, Loaded, TaskExport, file_check

if TYPE_CHECKING:
    from sentence_transformers import SparseEncoder

Encoded = Exported[SparseSpec, SparseGraph, SparseCheckResult]


def sparse_encoder_identity(spec: SparseSpec, model: SparseEncoder) -> None:
    """Refuses a SparseEncoder whose masked language model's class, SpladePooling's strategy or
    activation is not the folder's. Its default max_active_dims is lifted: the graph returns
    every activation, and the check compares them all (the record carries the default)."""
    pooling = model[1]
    mlm = hf_encoder(model)
    loaded = (type(mlm).__name__, pooling.pooling_strategy, pooling.activation_function)
    expected = (spec.architecture, spec.pooling_strategy, spec.activation_function)
    if loaded != expected:
        raise SystemExit(
            f"{spec.model_dir}: loaded as (class, pooling, activation) {loaded}, the folder "
            f"says {expected}"
        )
    model.max_active_dims = None


def sparse_graph(spec: SparseSpec, model: SparseEncoder) -> SparseGraph:
    return SparseGraph(hf_encoder(model), spec.pooling_strategy)


def sparse_check_set(loaded: Loaded[SparseSpec, SparseEncoder], _: SparseGraph) -> SparseCheckSet:
    return build_sparse_check_set(loaded.spec, loaded.model, loaded.tokenizer)


def sparse_record(exported: Encoded) -> dict[str, Any]:
    """The content of a sparse encoder's export.json: what the encoder and the shared tokenizer
    stage need (the tokenizer stage reads max_seq_length, vocab_size, prompts and
    default_prompt_name, named as in the bi-encoder's record) and the check's results."""
    spec = exported.spec
    return {
        **exported.opening_record(),
        "pooling_strategy": spec.pooling_strategy,
        "activation_function": spec.activation_function,
        "inputs": list(exported.graph.input_names),
        "max_seq_length": spec.max_seq_length,
        # The activations' width, and the bound token ids must lie below.
        "vocab_size": spec.vocab_size,
        "prompts": spec.prompts,
        "default_prompt_name": spec.default_prompt_name,
        # How many of a row's largest values SparseEncoder.encode keeps unasked; null: all. The
        # graph returns them all.
        "max_active_dims": spec.max_active_dims,
        **exported.closing_record(),
    }


def sparse_line(exported: Encoded) -> str:
    spec = exported.spec
    return (
        f"{exported.opening_line()} pooling={spec.pooling_strategy} "
        f"activation={spec.activation_function} vocab_size={spec.vocab_size} "
        f"max_seq_length={spec.max_seq_length} prompts={sorted(spec.prompts) or 'none'} "
        f"max_active_dims={spec.max_active_dims} "
        f"{exported.result.summary()}"
    )


SPARSE_EXPORT = TaskExport(
    task=SPARSE,
    read_spec=read_sparse_spec,
    identity=sparse_encoder_identity,
    graph=sparse_graph,
    examples=TEXT_EXAMPLES,
    check_set=sparse_check_set,
    check=file_check(sparse_check),
    record=sparse_record,
    line=sparse_line,
)
