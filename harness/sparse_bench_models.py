"""Random-weight SPLADE folders of real sizes, and a dense folder of each one's encoder, for
measuring sparse encoding throughput against dense (perf/sparse.py): a BERT-base shape (768 wide,
12 layers, 12 heads, intermediate 3072, as naver/splade-cocondenser-ensembledistil) and a
MiniLM-L6 shape (384 wide, 6 layers, 12 heads, intermediate 1536). Each shape is two folders:
a SparseEncoder (a BertForMaskedLM under MLMTransformer and SpladePooling("max")) and a
SentenceTransformer of the same BertModel weights under mean Pooling, so the two differ only by
the vocabulary head. Max length 512 and the packaged MiniLM's real uncased WordPiece vocabulary
(30522 tokens), so texts tokenize to the lengths real models see. Throughput on them is that of
random weights.

    .venv-export/bin/python -m harness.sparse_bench_models OUT_DIR [--model NAME ...]

Needs the export environment (torch, transformers, sentence-transformers). Seeded: the same
versions write the same weights. A folder already there in its shape is kept, so its export
stays current.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from harness.model_builds import Build, ModelBuilds
from harness.rerank_bench_models import MAX_LENGTH, SEED, bench_tokenizer, has_bert_shape


@dataclass(frozen=True)
class SparseBenchModel:
    """One size of BERT masked language model, and its MLM output bias."""

    name: str  # the SparseEncoder's folder and catalog name
    hidden: int
    layers: int
    heads: int
    intermediate: int
    # With random weights a zero bias leaves about half the vocabulary active. Measured on
    # perf/sparse.py's documents (about 98 tokens): -2.0 leaves 205-271 active terms on the
    # BERT-base shape, -1.5 133-192 on the MiniLM one (its logits spread less), in the range of
    # a trained SPLADE model's documents (about 100-300). Steep: a quarter step more negative
    # leaves 4 to 15 times fewer.
    mlm_bias: float

    @property
    def dense_name(self) -> str:
        """The SentenceTransformer of the same encoder: its folder and catalog name."""
        return f"{self.name}-dense"


BENCH_MODELS: tuple[SparseBenchModel, ...] = (
    SparseBenchModel("bert-base-splade-random", 768, 12, 12, 3072, mlm_bias=-2.0),
    SparseBenchModel("minilm-l6-splade-random", 384, 6, 12, 1536, mlm_bias=-1.5),
)


def _replace(target: Path, partial_folder: Path) -> Path:
    """Renamed whole: a folder that is there is complete."""
    shutil.rmtree(target, ignore_errors=True)
    partial_folder.rename(target)
    return target


def _without_library_prompts(folder: Path) -> None:
    """What the folder says is what the export reads: no prompts (the library would add empty
    query/document entries of its own)."""
    st_config_path = folder / "config_sentence_transformers.json"
    st_config = json.loads(st_config_path.read_text(encoding="utf-8"))
    st_config["prompts"] = {}
    st_config_path.write_text(json.dumps(st_config, indent=2) + "\n", encoding="utf-8")


def build_sparse(spec: SparseBenchModel, out_dir: Path) -> Path:
    """Writes spec's SparseEncoder folder to out_dir / spec.name, unless it is there in spec's
    shape."""
    target = out_dir / spec.name
    if has_bert_shape(target, spec.hidden, spec.layers, spec.heads, spec.intermediate):
        return target
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling
    from transformers import BertConfig, BertForMaskedLM

    tokenizer = bench_tokenizer()
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        intermediate_size=spec.intermediate,
        max_position_embeddings=MAX_LENGTH,
    )
    torch.manual_seed(SEED)
    mlm = BertForMaskedLM(config).eval()
    with torch.no_grad():
        mlm.cls.predictions.bias.fill_(spec.mlm_bias)
    partial_folder = out_dir / f"{spec.name}.partial"
    shutil.rmtree(partial_folder, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"sparse_bench_{spec.name}_") as workdir:
        # As a downloaded checkpoint: the MLM and tokenizer saved by transformers, then loaded
        # by the MLMTransformer module, as published SPLADE folders name it.
        mlm.save_pretrained(workdir)
        tokenizer.save_pretrained(workdir)
        modules = [
            MLMTransformer(workdir, max_seq_length=MAX_LENGTH),
            SpladePooling("max", embedding_dimension=config.vocab_size),
        ]
        SparseEncoder(modules=modules, device="cpu").save(str(partial_folder))
    _without_library_prompts(partial_folder)
    return _replace(target, partial_folder)


def build_dense(spec: SparseBenchModel, out_dir: Path) -> Path:
    """Writes the SentenceTransformer of spec's SparseEncoder's encoder (built first where
    missing) to out_dir / spec.dense_name, unless it is there in spec's shape."""
    target = out_dir / spec.dense_name
    if has_bert_shape(target, spec.hidden, spec.layers, spec.heads, spec.intermediate):
        return target
    sparse = build_sparse(spec, out_dir)
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import AutoTokenizer, BertForMaskedLM

    partial_folder = out_dir / f"{spec.dense_name}.partial"
    shutil.rmtree(partial_folder, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"sparse_bench_{spec.dense_name}_") as workdir:
        # The MLM's body alone, as the SparseEncoder folder holds it: the same weights.
        BertForMaskedLM.from_pretrained(str(sparse)).bert.save_pretrained(workdir)
        AutoTokenizer.from_pretrained(str(sparse)).save_pretrained(workdir)
        # The Transformer module loads it with a pooler layer the body lacks; seeded, so that
        # unused layer's weights are the same on every build.
        torch.manual_seed(SEED)
        modules = [Transformer(workdir, max_seq_length=MAX_LENGTH), Pooling(spec.hidden, "mean")]
        SentenceTransformer(modules=modules, device="cpu").save(str(partial_folder))
    _without_library_prompts(partial_folder)
    return _replace(target, partial_folder)


def _builds() -> dict[str, Build]:
    """Each shape's SparseEncoder, then its dense folder."""
    builds: dict[str, Build] = {}
    for model in BENCH_MODELS:
        builds[model.name] = partial(build_sparse, model)
        builds[model.dense_name] = partial(build_dense, model)
    return builds


BUILDS = ModelBuilds("harness.sparse_bench_models", "models", _builds())
build_in_export_environment = BUILDS.build_in_export_environment


if __name__ == "__main__":
    BUILDS.main(__doc__.splitlines()[0])
