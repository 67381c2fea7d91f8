"""The reranker's export, declared (task_export.TaskExport): a CrossEncoder folder
(rerank_folder.py) whose classifier must load as its architecture's class with its labels and
apply its activation, its scoring graph (rerank_head.py) traced on pairs, the plain graph only,
checked against CrossEncoder.predict (score_check.py), its record and its line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from embedding_catalog.tasks import RERANK
from rerank_folder import RerankSpec, read_rerank_spec
from rerank_head import RerankGraph
from score_check import (
    PairCheckSet,
    ScoreCheckResult,
    build_pair_check_set,
    score_check,
)
from st_model import hf_encoder
from task_export import Exported, Loaded, TaskExport, file_check

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

Reranked = Exported[RerankSpec, RerankGraph, ScoreCheckResult]
# Pairs the graph is traced on.
PAIR_EXAMPLES = (
    ("A query", "An example."),
    ("A query", "A somewhat longer example document for tracing."),
)


def cross_encoder_identity(spec: RerankSpec, model: CrossEncoder) -> None:
    """Refuses a CrossEncoder whose classifier did not load as the folder's class and labels, or
    that applies another activation than the folder names."""
    from sentence_transformers.util import fullname

    classifier = hf_encoder(model)
    if type(classifier).__name__ != spec.architecture or model.num_labels != spec.num_labels:
        raise SystemExit(
            f"{spec.model_dir}: model_type {spec.model_type!r} loaded as "
            f"{type(classifier).__name__} with {model.num_labels} labels, expected transformers' "
            f"{spec.architecture} with {spec.num_labels}"
        )
    # Older folders name it in config.json too (sbert_ce_default_activation_function): the
    # function predict() applies must be the one the graph computes.
    loaded = fullname(model.activation_fn)
    if loaded != spec.activation_fn:
        raise SystemExit(
            f"{spec.model_dir}: CrossEncoder applies {loaded}, the folder names "
            f"{spec.activation_fn}"
        )


def rerank_graph(spec: RerankSpec, model: CrossEncoder) -> RerankGraph:
    return RerankGraph(hf_encoder(model), spec.activation)


def pair_check_set(loaded: Loaded[RerankSpec, CrossEncoder], graph: RerankGraph) -> PairCheckSet:
    return build_pair_check_set(
        loaded.spec, loaded.model, loaded.tokenizer, graph.takes_token_types
    )


def rerank_record(exported: Reranked) -> dict[str, Any]:
    """The content of a reranker's export.json: what the scorer and the pair tokenizer need
    (inputs, max length, vocabularies, activation; prompts and default_prompt_name, which the
    pair tokenizer puts before the query, named as in the bi-encoder's record) and the check's
    results."""
    spec, inputs = exported.spec, exported.graph.input_names
    return {
        **exported.opening_record(),
        "num_labels": spec.num_labels,
        "activation": spec.activation,
        "activation_fn": spec.activation_fn,
        "inputs": list(inputs),
        "max_seq_length": spec.max_seq_length,
        "vocab_size": spec.vocab_size,
        # Token type ids must lie below it; null where the graph takes none.
        "type_vocab_size": spec.type_vocab_size if "token_type_ids" in inputs else None,
        "prompts": spec.prompts,
        "default_prompt_name": spec.default_prompt_name,
        **exported.closing_record(),
    }


def rerank_line(exported: Reranked) -> str:
    spec = exported.spec
    return (
        f"{exported.opening_line()} inputs={'+'.join(exported.graph.input_names)} "
        f"max_seq_length={spec.max_seq_length} activation={spec.activation} "
        f"prompts={sorted(spec.prompts) or 'none'} "
        f"{exported.result.summary()}"
    )


RERANK_EXPORT = TaskExport(
    task=RERANK,
    read_spec=read_rerank_spec,
    identity=cross_encoder_identity,
    graph=rerank_graph,
    examples=PAIR_EXAMPLES,
    check_set=pair_check_set,
    check=file_check(score_check),
    record=rerank_record,
    line=rerank_line,
)
