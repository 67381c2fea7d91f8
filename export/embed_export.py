"""The bi-encoder's export, declared (task_export.TaskExport): a SentenceTransformer folder
(embed_folder.py) whose encoder must load as its architecture's class, its embedding graph
(embedding_head.py), in any graph kind, checked by cosine against SentenceTransformer.encode at
the bar of its kind (reference_check.py), its record and its line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from embed_folder import EmbedSpec, read_embed_spec
from embedding_catalog.tasks import EMBED
from embedding_head import EmbeddingGraph, head_modules
from onnx_graph import TEXT_EXAMPLES
from optimize_graph import GRAPH_KINDS, GraphKind
from reference_check import MIN_COSINE, CheckResult, CheckSet, build_check_set, self_check
from st_model import hf_encoder
from task_export import Exported, Loaded, TaskExport

if TYPE_CHECKING:
    from pathlib import Path

    from sentence_transformers import SentenceTransformer

Embedded = Exported[EmbedSpec, EmbeddingGraph, CheckResult]


def bi_encoder_identity(spec: EmbedSpec, model: SentenceTransformer) -> None:
    """Refuses a model whose encoder did not load as its architecture's transformers class."""
    encoder = hf_encoder(model)
    if type(encoder).__name__ != spec.architecture:
        raise SystemExit(
            f"{spec.model_dir}: model_type {spec.model_type!r} loaded as "
            f"{type(encoder).__name__}, expected transformers' {spec.architecture}"
        )


def embedding_graph(spec: EmbedSpec, model: SentenceTransformer) -> EmbeddingGraph:
    return EmbeddingGraph(hf_encoder(model), spec.pooling, head_modules(model))


def cosine_check_set(loaded: Loaded[EmbedSpec, SentenceTransformer], _: EmbeddingGraph) -> CheckSet:
    return build_check_set(loaded.spec, loaded.model, loaded.tokenizer)


def cosine_check(
    onnx_path: Path,
    loaded: Loaded[EmbedSpec, SentenceTransformer],
    check: CheckSet,
    kind: GraphKind,
) -> CheckResult:
    return self_check(onnx_path, loaded.model, check, loaded.spec, MIN_COSINE[kind])


def embed_record(exported: Embedded) -> dict[str, Any]:
    """The content of a bi-encoder's export.json."""
    spec, result, build = exported.spec, exported.result, exported.build
    return {
        "graph": build.kind,
        "fusions": build.fusions,
        "quantization": build.quantization,
        "min_cosine_required": MIN_COSINE[build.kind],
        "model_dir": str(spec.model_dir),
        "model_type": spec.model_type,
        "modules": list(spec.modules),
        "pooling": spec.pooling,
        "embedding_dim": result.embedding_dim,
        "max_seq_length": spec.max_seq_length,
        "vocab_size": spec.vocab_size,
        # What the tokenizer stage puts before a text asked for with prompt_name (plain string
        # concatenation, as sentence-transformers does), and the prompt it applies unasked.
        "prompts": spec.prompts,
        "default_prompt_name": spec.default_prompt_name,
        **exported.closing_record(),
    }


def embed_line(exported: Embedded) -> str:
    spec, result, build = exported.spec, exported.result, exported.build
    return (
        f"exported {spec.model_type} graph={build.kind} fusions={build.fusions or 'none'} "
        f"pooling={spec.pooling} modules={'+'.join(spec.modules)} dims={result.embedding_dim} "
        f"max_seq_length={spec.max_seq_length} prompts={sorted(spec.prompts) or 'none'} "
        f"min_cosine={result.min_cosine:.7f}"
    )


EMBED_EXPORT = TaskExport(
    task=EMBED,
    read_spec=read_embed_spec,
    identity=bi_encoder_identity,
    graph=embedding_graph,
    examples=TEXT_EXAMPLES,
    check_set=cosine_check_set,
    check=cosine_check,
    record=embed_record,
    line=embed_line,
    graph_kinds=GRAPH_KINDS,
)
