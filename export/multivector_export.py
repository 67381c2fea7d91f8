"""The multi-vector encoder's export, declared (task_export.TaskExport): a MultiVectorEncoder folder
(multivector_folder.py) whose encoder, modules and multi-vector settings must load as the folder
says, its token-vectors graph (multivector_head.py) fed rows built by model_common.multivector
from the record's settings (multivector_rows.py), the plain graph only (a folder's token pooling
runs after it, in the encoder stage, from the record's token_pooling), checked with that pooling
against encode_query and encode_document (multivector_check.py), its record and its line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from embedding_catalog.tasks import MULTIVECTOR
from model_common.multivector import ROLES
from multivector_check import (
    MultiVectorCheckResult,
    MultiVectorCheckSet,
    build_multivector_check_set,
    multivector_check,
)
from multivector_folder import (
    MASK_MODULE,
    POOLING_MODULE,
    MultiVectorSpec,
    read_multivector_spec,
)
from multivector_head import MultiVectorGraph
from multivector_rows import role_prompt, row_settings, served_prompts
from onnx_graph import TEXT_EXAMPLES
from st_model import hf_encoder
from task_export import Exported, Loaded, TaskExport, file_check

if TYPE_CHECKING:
    from sentence_transformers import MultiVectorEncoder

Encoded = Exported[MultiVectorSpec, MultiVectorGraph, MultiVectorCheckResult]


def loaded_pooling(model: MultiVectorEncoder) -> dict[str, Any] | None:
    """The loaded HierarchicalTokenPooling's settings in the record's shape (the roles it pools
    of ROLES, as the spec keeps them), None where the model has none."""
    pooling = [module for module in model if type(module).__name__ == POOLING_MODULE]
    if not pooling:
        return None
    module = pooling[0]
    return {
        "pool_factor": float(module.pool_factor),
        "num_protected_tokens": module.num_protected_tokens,
        "normalize_embeddings": module.normalize_embeddings,
        "tasks": [role for role in ROLES if module.applies_to(role)],
    }


def loaded_settings(model: MultiVectorEncoder) -> dict[str, Any]:
    """What the loaded model holds of the settings the spec reads from the folder."""
    transformer = model[0]
    expansion = transformer.query_expansion
    masks = [module for module in model if type(module).__name__ == MASK_MODULE]
    return {
        "modules": tuple(type(module).__name__ for module in model),
        "encoder": type(hf_encoder(model)).__name__,
        "query_length": transformer.query_length,
        "document_length": transformer.document_length,
        "query_expansion": None if expansion is None else dict(expansion),
        "skiplist_words": tuple(masks[0].skiplist_words) if masks else (),
        "keep_only_token_ids": masks[0].keep_only_token_ids if masks else None,
        "prompts": {role: role_prompt(model.prompts, role) for role in ROLES},
        "similarity_fn_name": model.similarity_fn_name,
        "embedding_dim": model.get_embedding_dimension(),
        "token_pooling": loaded_pooling(model),
    }


def multivector_identity(spec: MultiVectorSpec, model: MultiVectorEncoder) -> None:
    """Refuses a MultiVectorEncoder that did not load as its folder says: its modules, its
    encoder's class, its Transformer's lengths and expansion, its skip-list, each role's prompt
    (a legacy prefix token would add its own), its similarity, its vectors' width and its token
    pooling's settings."""
    loaded = loaded_settings(model)
    expected = {
        "modules": spec.modules,
        "encoder": spec.architecture,
        "query_length": spec.query_length,
        "document_length": spec.document_length,
        "query_expansion": spec.query_expansion,
        "skiplist_words": spec.skiplist_words,
        "keep_only_token_ids": None,
        "prompts": {role: role_prompt(spec.prompts, role) for role in ROLES},
        "similarity_fn_name": spec.similarity_fn_name,
        "embedding_dim": spec.embedding_dim,
        "token_pooling": spec.token_pooling,
    }
    differing = {name: loaded[name] for name in expected if loaded[name] != expected[name]}
    if differing:
        raise SystemExit(
            f"{spec.model_dir}: MultiVectorEncoder loaded {differing}, the folder says "
            f"{ {name: expected[name] for name in differing} }"
        )


def multivector_graph(spec: MultiVectorSpec, model: MultiVectorEncoder) -> MultiVectorGraph:
    """The encoder and the Dense and Normalize modules, in order (the MultiVectorMask's choice
    is the rows', the token pooling the encoder stage's), with the row settings resolved by the
    model's tokenizer."""
    outside = (MASK_MODULE, POOLING_MODULE)
    head = [module for module in list(model)[1:] if type(module).__name__ not in outside]
    return MultiVectorGraph(hf_encoder(model), head, row_settings(spec, model.tokenizer))


def multivector_check_set(
    loaded: Loaded[MultiVectorSpec, MultiVectorEncoder], graph: MultiVectorGraph
) -> MultiVectorCheckSet:
    return build_multivector_check_set(loaded.spec, loaded.model, loaded.tokenizer, graph.rows)


def multivector_record(exported: Encoded) -> dict[str, Any]:
    """The content of a multi-vector encoder's export.json: what the encoder, the tokenizer
    stages (model_common.multivector reads the row settings) and the MaxSim scorer need, and
    the check's results."""
    spec, rows = exported.spec, exported.graph.rows
    return {
        **exported.opening_record(),
        "inputs": list(exported.graph.input_names),
        "max_seq_length": spec.max_seq_length,
        # The bound token ids must lie below.
        "vocab_size": spec.vocab_size,
        # Each token vector's width, after the projections.
        "embedding_dim": spec.embedding_dim,
        # A role's prompt is prompts[role], as encode_query / encode_document put it; both roles
        # are named, an empty prompt where the folder sets none.
        "prompts": served_prompts(spec.prompts),
        "default_prompt_name": spec.default_prompt_name,
        "query_length": rows["query_length"],
        "document_length": rows["document_length"],
        "query_expansion": rows["query_expansion"],
        "skiplist_ids": rows["skiplist_ids"],
        "skiplist_tasks": rows["skiplist_tasks"],
        # The model's own pooling of the graph's vectors, in the encoder stage; null for none.
        "token_pooling": spec.token_pooling,
        "normalized": spec.normalized,
        "similarity_fn_name": spec.similarity_fn_name,
        **exported.closing_record(),
    }


def multivector_line(exported: Encoded) -> str:
    spec, rows = exported.spec, exported.graph.rows
    expansion = rows["query_expansion"]
    expanded = "none" if expansion is None else f"{expansion['strategy']}:{expansion['length']}"
    pooling = spec.token_pooling
    pooled = (
        "none"
        if pooling is None
        else f"{pooling['pool_factor']:g} ({','.join(pooling['tasks']) or 'none'})"
    )
    return (
        f"{exported.opening_line()} embedding_dim={spec.embedding_dim} "
        f"max_seq_length={spec.max_seq_length} query_length={spec.query_length} "
        f"document_length={spec.document_length} expansion={expanded} "
        f"skiplist={len(rows['skiplist_ids'])} ids ({','.join(spec.skiplist_tasks) or 'none'}) "
        f"normalized={spec.normalized} token_pooling={pooled} "
        f"prompts={sorted(spec.prompts) or 'none'} "
        f"{exported.result.summary()}"
    )


MULTIVECTOR_EXPORT = TaskExport(
    task=MULTIVECTOR,
    read_spec=read_multivector_spec,
    identity=multivector_identity,
    graph=multivector_graph,
    examples=TEXT_EXAMPLES,
    check_set=multivector_check_set,
    check=file_check(multivector_check),
    record=multivector_record,
    line=multivector_line,
)
