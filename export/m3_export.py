"""BGE-M3's export, declared (task_export.TaskExport): a BGE-M3 folder (m3_folder.py) loaded as
FlagEmbedding's BGEM3FlagModel, which must load as the folder says, its graph of the dense
vector, the sparse weights and the ColBERT vectors from one pass (m3_head.py), the plain graph
only, at opset 18 or later (M3_OPSET), checked against BGEM3FlagModel.encode (m3_check.py), its
record and its line.

BGEM3FlagModel is no sentence-transformers class, so the M3 export loads it itself (M3Export's
load) rather than through st_model.load_checked."""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedding_catalog.tasks import M3
from m3_check import M3CheckResult, M3CheckSet, build_m3_check_set, m3_check
from m3_folder import SKIPPED_TOKENS, M3Spec, read_m3_spec
from m3_head import M3_OPSET, M3Graph
from onnx_graph import TEXT_EXAMPLES
from served_tokenizer import load_tokenizer
from task_export import Exported, Loaded, TaskExport, file_check

if TYPE_CHECKING:
    from FlagEmbedding import BGEM3FlagModel

Encoded = Exported[M3Spec, M3Graph, M3CheckResult]


def load_m3_model(spec: M3Spec) -> BGEM3FlagModel:
    """The folder as BGEM3FlagModel, on CPU, in float32, without network access."""
    # huggingface_hub reads this once, when it is first imported (through FlagEmbedding).
    os.environ["HF_HUB_OFFLINE"] = "1"
    from FlagEmbedding import BGEM3FlagModel

    return BGEM3FlagModel(str(spec.model_dir), use_fp16=False, devices="cpu")


def skipped_ids(model: BGEM3FlagModel) -> tuple[int, ...]:
    """The token ids BGEM3FlagModel leaves out of the lexical weights, as it finds them."""
    tokenizer = model.tokenizer
    tokens = [tokenizer.special_tokens_map.get(name) for name in SKIPPED_TOKENS]
    return tuple(sorted({int(tokenizer.convert_tokens_to_ids(token)) for token in tokens if token}))


def m3_identity(spec: M3Spec, model: BGEM3FlagModel) -> None:
    """Refuses a BGEM3FlagModel whose encoder class, hidden size or skipped token ids are not
    the folder's."""
    encoder = model.model.model
    loaded = (type(encoder).__name__, int(encoder.config.hidden_size), skipped_ids(model))
    expected = (spec.architecture, spec.hidden_size, spec.skipped_token_ids)
    if loaded != expected:
        raise SystemExit(
            f"{spec.model_dir}: loaded as (encoder, hidden size, skipped token ids) {loaded}, "
            f"the folder says {expected}"
        )


@dataclass(frozen=True)
class M3Export(TaskExport[M3Spec, "BGEM3FlagModel", M3Graph, M3CheckSet, M3CheckResult]):
    """The TaskExport whose model is BGEM3FlagModel's, loaded by load_m3_model."""

    def load(self, model_dir: Path) -> Loaded[M3Spec, BGEM3FlagModel]:
        spec = self.read_spec(model_dir)
        model = load_m3_model(spec)
        self.identity(spec, model)
        return Loaded(spec, model, load_tokenizer(spec.transformer_dir, spec.max_seq_length))


def m3_graph(spec: M3Spec, model: BGEM3FlagModel) -> M3Graph:
    heads = model.model
    return M3Graph(
        heads.model,
        heads.sparse_linear,
        heads.colbert_linear,
        spec.vocab_size,
        spec.skipped_token_ids,
    )


def m3_check_set(loaded: Loaded[M3Spec, BGEM3FlagModel], _: M3Graph) -> M3CheckSet:
    return build_m3_check_set(loaded.spec, loaded.model, loaded.tokenizer)


def m3_record(exported: Encoded) -> dict[str, Any]:
    """The content of a BGE-M3 export.json: what the encoder and the shared tokenizer stage need
    (the tokenizer stage reads max_seq_length, vocab_size, prompts and default_prompt_name,
    named as in the bi-encoder's record), the outputs' widths and the check's results."""
    spec = exported.spec
    closing = exported.closing_record()
    return {
        **exported.opening_record(),
        "inputs": list(exported.graph.input_names),
        "max_seq_length": spec.max_seq_length,
        # The activations' width, and the bound token ids must lie below.
        "vocab_size": spec.vocab_size,
        "prompts": spec.prompts,
        "default_prompt_name": spec.default_prompt_name,
        # The dense vector's width (embedding), as the bi-encoder's record names it.
        "embedding_dim": spec.hidden_size,
        # The token vectors' width; a row's vectors are its real tokens' but the CLS's.
        "colbert_dim": spec.colbert_dim,
        # The ids whose activations the graph leaves at 0, as FlagEmbedding skips them.
        "skipped_token_ids": list(spec.skipped_token_ids),
        **closing,
        "versions": {**closing["versions"], "FlagEmbedding": version("FlagEmbedding")},
    }


def m3_line(exported: Encoded) -> str:
    spec = exported.spec
    return (
        f"{exported.opening_line()} embedding_dim={spec.hidden_size} "
        f"colbert_dim={spec.colbert_dim} vocab_size={spec.vocab_size} "
        f"max_seq_length={spec.max_seq_length} prompts={sorted(spec.prompts) or 'none'} "
        f"opset={exported.opset} {exported.result.summary()}"
    )


M3_EXPORT = M3Export(
    task=M3,
    read_spec=read_m3_spec,
    identity=m3_identity,
    graph=m3_graph,
    examples=TEXT_EXAMPLES,
    check_set=m3_check_set,
    check=file_check(m3_check),
    record=m3_record,
    line=m3_line,
    opset=M3_OPSET,
)
