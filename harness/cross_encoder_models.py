"""Tiny random-weight sentence-transformers CrossEncoder folders (one-label rerankers), so the
reranker's export and serving can be tested without a model hub: BERT (a pair's segments as
token type ids), XLM-RoBERTa (one token type) and BERT with an Identity activation (raw
logits). Each is a transformers sequence classifier built from a small config, with the family
builder's tokenizer (harness/family_models.py), wrapped in a CrossEncoder and saved by
`CrossEncoder.save`, as sentence-transformers 5+ saves rerankers.

    .venv-export/bin/python -m harness.cross_encoder_models OUT_DIR

Needs the export environment (torch, transformers, sentence-transformers). The build is seeded:
the same versions write the same weights and vocabularies.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from harness.export_environment import run_in_export_environment
from harness.family_models import (
    BERT_SPECIALS,
    MAX_SEQ_LENGTH,
    SEED,
    _bert_config,
    _roberta_specials,
    _xlmr_config,
    unigram_tokenizer,
    wordpiece_tokenizer,
)

# transformers' model input names: BertTokenizer's feed token type ids, XLMRobertaTokenizer's not
# (and PreTrainedTokenizerFast's default feeds none).
WITH_TOKEN_TYPES = ["input_ids", "token_type_ids", "attention_mask"]
WITHOUT_TOKEN_TYPES = ["input_ids", "attention_mask"]


@dataclass(frozen=True)
class CrossEncoderModel:
    """How one test reranker is built: its classifier, tokenizer and activation."""

    name: str
    tokenizer: Callable[[], Tokenizer]
    special_tokens: dict[str, str]
    config: Callable[[Tokenizer], Any]  # tokenizer -> transformers config
    model_input_names: list[str]
    identity: bool = False  # raw logits instead of CrossEncoder's default sigmoid


CROSS_ENCODERS: tuple[CrossEncoderModel, ...] = (
    CrossEncoderModel(
        name="bert",
        tokenizer=lambda: wordpiece_tokenizer("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"),
        special_tokens=BERT_SPECIALS,
        config=_bert_config,
        model_input_names=WITH_TOKEN_TYPES,
    ),
    CrossEncoderModel(
        name="xlmr",
        tokenizer=unigram_tokenizer,
        special_tokens=_roberta_specials("<unk>"),
        config=_xlmr_config,
        model_input_names=WITHOUT_TOKEN_TYPES,
    ),
    CrossEncoderModel(
        name="bert_identity",
        tokenizer=lambda: wordpiece_tokenizer("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"),
        special_tokens=BERT_SPECIALS,
        config=_bert_config,
        model_input_names=WITH_TOKEN_TYPES,
        identity=True,
    ),
)
CROSS_ENCODER_NAMES = tuple(model.name for model in CROSS_ENCODERS)


def build_cross_encoder(spec: CrossEncoderModel, out_dir: Path) -> Path:
    """Writes one reranker's CrossEncoder folder to out_dir / spec.name."""
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoModelForSequenceClassification, PreTrainedTokenizerFast

    target = out_dir / spec.name
    shutil.rmtree(target, ignore_errors=True)
    tokenizer = spec.tokenizer()
    config = spec.config(tokenizer)
    config.num_labels = 1
    torch.manual_seed(SEED)
    classifier = AutoModelForSequenceClassification.from_config(config).eval()
    with tempfile.TemporaryDirectory(prefix=f"cross_encoder_{spec.name}_") as workdir:
        # As a downloaded checkpoint: the classifier and tokenizer saved by transformers, then
        # loaded by CrossEncoder, which saves the folder with its own configs.
        classifier.save_pretrained(workdir)
        PreTrainedTokenizerFast(
            tokenizer_object=tokenizer,
            model_max_length=MAX_SEQ_LENGTH,
            model_input_names=spec.model_input_names,
            **spec.special_tokens,
        ).save_pretrained(workdir)
        activation = torch.nn.Identity() if spec.identity else None
        CrossEncoder(workdir, device="cpu", activation_fn=activation).save(str(target))
    return target


def build_cross_encoder_models(
    out_dir: Path, names: Sequence[str] = CROSS_ENCODER_NAMES
) -> dict[str, Path]:
    """Builds the named rerankers' folders under out_dir; returns name -> folder."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    unknown = sorted(set(names) - set(CROSS_ENCODER_NAMES))
    if unknown:
        raise ValueError(f"unknown cross-encoders {unknown}; known: {list(CROSS_ENCODER_NAMES)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    return {
        model.name: build_cross_encoder(model, out_dir)
        for model in CROSS_ENCODERS
        if model.name in names
    }


def build_in_export_environment(out_dir: Path, names: Sequence[str] = CROSS_ENCODER_NAMES) -> None:
    """build_cross_encoder_models for callers without torch (the tests): run in the export
    environment, where it is."""
    models = [argument for name in names for argument in ("--model", name)]
    run_in_export_environment(["-m", "harness.cross_encoder_models", str(out_dir), *models])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="folder to write one subfolder per model into")
    parser.add_argument(
        "--model", action="append", choices=CROSS_ENCODER_NAMES, help="build only these"
    )
    args = parser.parse_args(argv)
    folders = build_cross_encoder_models(args.out_dir, args.model or CROSS_ENCODER_NAMES)
    print(json.dumps({name: str(path) for name, path in folders.items()}, indent=2))


if __name__ == "__main__":
    main()
