"""Tiny random-weight sentence-transformers SparseEncoder folders (SPLADE), so the sparse
encoder's export and serving can be tested without a model hub: bert_max (max pooling, with a
query prompt) and bert_sum (sum pooling), the same BERT masked language model under each. Each is
a transformers BertForMaskedLM built from a small config, with the family builder's WordPiece
tokenizer (harness/family_models.py), wrapped in an MLMTransformer and SpladePooling and saved by
`SparseEncoder.save`.

    .venv-export/bin/python -m harness.sparse_encoder_models OUT_DIR

Needs the export environment (torch, transformers, sentence-transformers). The build is seeded:
the same versions write the same weights and vocabularies.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from harness.cross_encoder_models import WITH_TOKEN_TYPES
from harness.family_models import (
    BERT_SPECIALS,
    MAX_SEQ_LENGTH,
    SEED,
    _bert_config,
    wordpiece_tokenizer,
)
from harness.model_builds import ModelBuilds

# With random weights about half the logits are positive, so half the vocabulary would be
# active; a negative MLM output bias leaves a few percent, as a trained SPLADE model's rows.
MLM_BIAS = -6.0
QUERY_PROMPTS = {"query": "query: "}


@dataclass(frozen=True)
class SparseEncoderModel:
    """How one test sparse encoder is built: its pooling and prompts."""

    name: str
    pooling_strategy: str
    prompts: dict[str, str] = field(default_factory=dict)


SPARSE_ENCODERS: tuple[SparseEncoderModel, ...] = (
    SparseEncoderModel(name="bert_max", pooling_strategy="max", prompts=QUERY_PROMPTS),
    SparseEncoderModel(name="bert_sum", pooling_strategy="sum"),
)
SPARSE_ENCODER_NAMES = tuple(model.name for model in SPARSE_ENCODERS)


def build_sparse_encoder(spec: SparseEncoderModel, out_dir: Path) -> Path:
    """Writes one sparse encoder's SparseEncoder folder to out_dir / spec.name."""
    import torch
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling
    from transformers import BertForMaskedLM, PreTrainedTokenizerFast

    target = out_dir / spec.name
    shutil.rmtree(target, ignore_errors=True)
    tokenizer = wordpiece_tokenizer("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]")
    config = _bert_config(tokenizer)
    # Seeded per model, so every model has the same weights whichever were built before.
    torch.manual_seed(SEED)
    mlm = BertForMaskedLM(config).eval()
    with torch.no_grad():
        mlm.cls.predictions.bias.fill_(MLM_BIAS)
    with tempfile.TemporaryDirectory(prefix=f"sparse_encoder_{spec.name}_") as workdir:
        # As a downloaded checkpoint: the MLM and tokenizer saved by transformers, then loaded
        # by the MLMTransformer module, as published SPLADE folders name it.
        mlm.save_pretrained(workdir)
        PreTrainedTokenizerFast(
            tokenizer_object=tokenizer,
            model_max_length=MAX_SEQ_LENGTH,
            model_input_names=WITH_TOKEN_TYPES,
            **BERT_SPECIALS,
        ).save_pretrained(workdir)
        modules = [
            MLMTransformer(workdir, max_seq_length=MAX_SEQ_LENGTH),
            SpladePooling(spec.pooling_strategy, embedding_dimension=config.vocab_size),
        ]
        SparseEncoder(modules=modules, device="cpu", prompts=dict(spec.prompts)).save(str(target))
    # What the folder says is what the export reads: the prompts exactly as given (the library
    # would add empty query/document entries of its own).
    st_config_path = target / "config_sentence_transformers.json"
    st_config = json.loads(st_config_path.read_text(encoding="utf-8"))
    st_config["prompts"] = dict(spec.prompts)
    st_config_path.write_text(json.dumps(st_config, indent=2) + "\n", encoding="utf-8")
    return target


BUILDS = ModelBuilds(
    "harness.sparse_encoder_models",
    "sparse encoders",
    {model.name: partial(build_sparse_encoder, model) for model in SPARSE_ENCODERS},
)
build_in_export_environment = BUILDS.build_in_export_environment


if __name__ == "__main__":
    BUILDS.main(__doc__.splitlines()[0])
