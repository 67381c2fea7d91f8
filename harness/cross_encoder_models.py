"""Tiny random-weight sentence-transformers CrossEncoder folders (one-label rerankers), so the
reranker's export and serving can be tested without a model hub: BERT (a pair's segments as
token type ids), XLM-RoBERTa (one token type) and BERT with an Identity activation (raw
logits). Each is a transformers sequence classifier built from a small config, with the family
builder's tokenizer (harness/family_models.py), wrapped in a CrossEncoder and saved by
`CrossEncoder.save`, as sentence-transformers 5+ saves rerankers. The Identity one has prompts,
its query prompt the default, so the default and a named prompt are served and checked.

    .venv-export/bin/python -m harness.cross_encoder_models OUT_DIR

Needs the export environment (torch, transformers, sentence-transformers). The build is seeded:
the same versions write the same weights and vocabularies.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

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
from harness.model_builds import ModelBuilds

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
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None


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
        prompts={"query": "query: ", "web": "Given a web search query: "},
        default_prompt_name="query",
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
        CrossEncoder(
            workdir,
            device="cpu",
            activation_fn=activation,
            prompts=dict(spec.prompts),
            default_prompt_name=spec.default_prompt_name,
        ).save(str(target))
    # What the folder says is what the export reads: the prompts exactly as given (the library
    # would add empty query/document entries of its own).
    st_config_path = target / "config_sentence_transformers.json"
    st_config = json.loads(st_config_path.read_text(encoding="utf-8"))
    st_config["prompts"] = dict(spec.prompts)
    st_config["default_prompt_name"] = spec.default_prompt_name
    st_config_path.write_text(json.dumps(st_config, indent=2) + "\n", encoding="utf-8")
    return target


BUILDS = ModelBuilds(
    "harness.cross_encoder_models",
    "cross-encoders",
    {model.name: partial(build_cross_encoder, model) for model in CROSS_ENCODERS},
)
build_in_export_environment = BUILDS.build_in_export_environment


if __name__ == "__main__":
    BUILDS.main(__doc__.splitlines()[0])
