"""A random-weight MultiVectorEncoder folder of a real ColBERT model's size, for measuring
multi-vector encoding and MaxSim reranking throughput (perf/multivector.py): a MiniLM-L6 shape
(384 wide, 6 layers, 12 heads, intermediate 1536, as the MiniLM cross-encoder of
harness/rerank_bench_models.py) with the packaged MiniLM's real uncased WordPiece vocabulary
(30522 tokens), max length 512, so texts tokenize to the lengths real models see; then PyLate's
default head: a 128-wide projection without bias, Normalize, queries expanded to exactly 32 mask
tokens (not attended), documents' punctuation skipped; documents cut at 512 tokens. No prompts. The modules are harness/multivector_models.py's (save_multivector_encoder).
Throughput on it is that of random weights.

    .venv-export/bin/python -m harness.multivector_bench_models OUT_DIR [--model NAME ...]

Needs the export environment (torch, transformers, sentence-transformers). Seeded: the same
versions write the same weights. A folder already there in its shape is kept, so its export
stays current.
"""

from __future__ import annotations

import json
import shutil
import string
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from harness.model_builds import ModelBuilds
from harness.multivector_models import DOCUMENT, MultiVectorModel, save_multivector_encoder
from harness.rerank_bench_models import MAX_LENGTH, SEED, bench_tokenizer, has_bert_shape


@dataclass(frozen=True)
class MultiVectorBenchModel:
    """One BERT size, and the multi-vector settings around it."""

    settings: MultiVectorModel
    hidden: int
    layers: int
    heads: int
    intermediate: int

    @property
    def name(self) -> str:
        return self.settings.name


BENCH_MODELS: tuple[MultiVectorBenchModel, ...] = (
    MultiVectorBenchModel(
        MultiVectorModel(
            name="minilm-l6-colbert-random",
            family="bert",
            dense_out=128,
            dense_bias=False,
            document_length=MAX_LENGTH,
            query_expansion={"strategy": "fixed", "length": 32, "attend": False},
            skiplist_words=tuple(string.punctuation),
            skiplist_tasks=(DOCUMENT,),
        ),
        hidden=384,
        layers=6,
        heads=12,
        intermediate=1536,
    ),
)
BENCH_MODEL_NAMES = tuple(model.name for model in BENCH_MODELS)


def _is_built(target: Path, spec: MultiVectorBenchModel) -> bool:
    """Whether target holds spec's encoder shape and projection width."""
    dense_config = target / "1_Dense" / "config.json"
    return (
        has_bert_shape(target, spec.hidden, spec.layers, spec.heads, spec.intermediate)
        and dense_config.exists()
        and json.loads(dense_config.read_text()).get("out_features") == spec.settings.dense_out
    )


def build_bench_model(spec: MultiVectorBenchModel, out_dir: Path) -> Path:
    """Writes spec's MultiVectorEncoder folder to out_dir / spec.name, unless it is there in
    spec's shape."""
    target = out_dir / spec.name
    if _is_built(target, spec):
        return target
    import torch
    from transformers import BertConfig, BertModel

    tokenizer = bench_tokenizer()
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        intermediate_size=spec.intermediate,
        max_position_embeddings=MAX_LENGTH,
    )
    # Seeded before the encoder and, through it, the projection drawn after it.
    torch.manual_seed(SEED)
    encoder = BertModel(config, add_pooling_layer=False).eval()
    partial_folder = out_dir / f"{spec.name}.partial"
    shutil.rmtree(partial_folder, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"multivector_bench_{spec.name}_") as workdir:
        # As a downloaded checkpoint, then wrapped as the test encoders are.
        encoder.save_pretrained(workdir)
        tokenizer.save_pretrained(workdir)
        save_multivector_encoder(
            spec.settings, Path(workdir), spec.hidden, MAX_LENGTH, partial_folder
        )
    # Renamed whole: a folder that is there is complete.
    shutil.rmtree(target, ignore_errors=True)
    partial_folder.rename(target)
    return target


BUILDS = ModelBuilds(
    "harness.multivector_bench_models",
    "models",
    {model.name: partial(build_bench_model, model) for model in BENCH_MODELS},
)
build_in_export_environment = BUILDS.build_in_export_environment


if __name__ == "__main__":
    BUILDS.main(__doc__.splitlines()[0])
