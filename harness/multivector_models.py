"""Tiny random-weight sentence-transformers MultiVectorEncoder folders (ColBERT-style late
interaction), so the multi-vector export and serving can be tested without a model hub:

- bert_colbert: BERT, PyLate's layout: the [Q] / [D] prompts, a 32-wide projection without bias,
  Normalize, fixed query expansion to 16 mask tokens (not attended), documents cut at 64 tokens
  and their punctuation skipped;
- bert_plain: BERT, no prompts, no expansion, no skip-list, a 48-wide projection with bias and
  tanh, Normalize, queries cut at 24 tokens;
- modernbert_colbert: ModernBERT, expansion to at least 12 mask tokens (attended), queries cut at
  32, punctuation skipped on both sides;
- bert_pooled: bert_colbert's backbone, prompts, projection and document skip-list without the
  expansion, and a HierarchicalTokenPooling (pool_factor 2, one protected token, normalized) of
  documents at the end of its pipeline.

Each encoder is the family's (harness/family_models.py: its config and its tokenizer builder),
wrapped in a Transformer carrying the multi-vector settings, the Dense projection, a
MultiVectorMask and Normalize (then the token pooling, where a model has one), and saved by `MultiVectorEncoder.save`.

    .venv-export/bin/python -m harness.multivector_models OUT_DIR

Needs the export environment (torch, transformers, sentence-transformers). The build is seeded:
the same versions write the same weights and vocabularies.
"""

from __future__ import annotations

import json
import shutil
import string
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models

from harness.family_models import FAMILIES, HIDDEN, MAX_SEQ_LENGTH, SEED, Family
from harness.model_builds import ModelBuilds

COLBERT_PROMPTS = {"query": "[Q] ", "document": "[D] "}
QUERY = "query"
DOCUMENT = "document"


@dataclass(frozen=True)
class MultiVectorModel:
    """How one test multi-vector encoder is built: its backbone family, its projection and the
    Transformer's and MultiVectorMask's multi-vector settings."""

    name: str
    family: str  # a harness.family_models family name
    dense_out: int
    dense_bias: bool
    # torch.nn's activation class name after the projection.
    dense_activation: str = "Identity"
    prompts: dict[str, str] = field(default_factory=dict)
    query_length: int | None = None
    document_length: int | None = None
    query_expansion: dict[str, Any] | None = None
    skiplist_words: tuple[str, ...] = ()
    skiplist_tasks: tuple[str, ...] = (DOCUMENT,)
    # HierarchicalTokenPooling's arguments, for a pooling module last in the pipeline.
    token_pooling: dict[str, Any] | None = None


MULTIVECTOR_MODELS: tuple[MultiVectorModel, ...] = (
    MultiVectorModel(
        name="bert_colbert",
        family="bert",
        dense_out=32,
        dense_bias=False,
        prompts=COLBERT_PROMPTS,
        document_length=64,
        query_expansion={"strategy": "fixed", "length": 16, "attend": False},
        skiplist_words=tuple(string.punctuation),
    ),
    MultiVectorModel(
        name="bert_plain",
        family="bert",
        dense_out=48,
        dense_bias=True,
        dense_activation="Tanh",
        query_length=24,
    ),
    MultiVectorModel(
        name="modernbert_colbert",
        family="modernbert",
        dense_out=32,
        dense_bias=False,
        prompts=COLBERT_PROMPTS,
        query_length=32,
        query_expansion={"strategy": "min", "length": 12, "attend": True},
        skiplist_words=tuple(string.punctuation),
        skiplist_tasks=(QUERY, DOCUMENT),
    ),
    MultiVectorModel(
        name="bert_pooled",
        family="bert",
        dense_out=32,
        dense_bias=False,
        prompts=COLBERT_PROMPTS,
        document_length=64,
        skiplist_words=tuple(string.punctuation),
        token_pooling={
            "pool_factor": 2,
            "num_protected_tokens": 1,
            "normalize_embeddings": True,
            "tasks": [DOCUMENT],
        },
    ),
)
MULTIVECTOR_NAMES = tuple(model.name for model in MULTIVECTOR_MODELS)


def _family(name: str) -> Family:
    return next(family for family in FAMILIES if family.name == name)


def with_punctuation(tokenizer: Tokenizer) -> Tokenizer:
    """The tokenizer with every ASCII punctuation character in a WordPiece vocabulary, as BERT's
    has them: the family builder's holds only the corpus' characters, which would make the [Q]
    and [D] prompts' brackets unknown tokens and leave most skip-list words unresolved. Added at
    the end, so the special tokens' ids (and the post-processor naming them) stay; a byte-level
    vocabulary has every character already."""
    model = tokenizer.model
    if not isinstance(model, models.WordPiece):
        return tokenizer
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    missing = [char for char in string.punctuation if char not in vocab]
    first = len(vocab)
    vocab.update((char, first + index) for index, char in enumerate(missing))
    tokenizer.model = models.WordPiece(vocab, unk_token=model.unk_token)
    return tokenizer


def build_multivector_encoder(spec: MultiVectorModel, out_dir: Path) -> Path:
    """Writes one multi-vector encoder's MultiVectorEncoder folder to out_dir / spec.name."""
    import torch
    from transformers import AutoModel, PreTrainedTokenizerFast

    target = out_dir / spec.name
    # A folder from an earlier build could keep modules this one does not write.
    shutil.rmtree(target, ignore_errors=True)
    family = _family(spec.family)
    tokenizer = with_punctuation(family.tokenizer())
    config = family.config(tokenizer)
    # Seeded per model, so its weights do not depend on which were built before.
    torch.manual_seed(SEED)
    encoder = AutoModel.from_config(config).eval()
    with tempfile.TemporaryDirectory(prefix=f"multivector_{spec.name}_") as workdir:
        # As a downloaded checkpoint: the encoder and tokenizer saved by transformers, then
        # loaded by the Transformer module.
        encoder.save_pretrained(workdir)
        PreTrainedTokenizerFast(
            tokenizer_object=tokenizer,
            model_max_length=MAX_SEQ_LENGTH,
            padding_side=family.padding_side,
            **family.special_tokens,
        ).save_pretrained(workdir)
        save_multivector_encoder(spec, Path(workdir), HIDDEN, MAX_SEQ_LENGTH, target)
    return target


def save_multivector_encoder(
    spec: MultiVectorModel, checkpoint: Path, hidden: int, max_seq_length: int, target: Path
) -> None:
    """Saves to `target` the MultiVectorEncoder of spec's modules around the encoder and
    tokenizer transformers saved in `checkpoint` (`hidden` wide): the Transformer with spec's
    multi-vector settings, the Dense projection, a MultiVectorMask and Normalize, then spec's
    token pooling where it names one (the library pools last, after Normalize). The Dense
    layer draws its weights from torch's generator as it stands, so a seeded caller gets the
    same ones each build. Shared with the benchmark encoders (multivector_bench_models.py)."""
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import (
        HierarchicalTokenPooling,
        MultiVectorMask,
    )

    transformer = Transformer(
        str(checkpoint),
        max_seq_length=max_seq_length,
        query_length=spec.query_length,
        document_length=spec.document_length,
        query_expansion=None if spec.query_expansion is None else dict(spec.query_expansion),
    )
    activation = getattr(torch.nn, spec.dense_activation)()
    modules: list[torch.nn.Module] = [
        transformer,
        Dense(
            hidden,
            spec.dense_out,
            bias=spec.dense_bias,
            activation_function=activation,
            module_input_name="token_embeddings",
        ),
        MultiVectorMask(
            skiplist_words=list(spec.skiplist_words), skiplist_tasks=list(spec.skiplist_tasks)
        ),
        Normalize(module_input_name="token_embeddings"),
    ]
    if spec.token_pooling is not None:
        modules.append(HierarchicalTokenPooling(**spec.token_pooling))
    model = MultiVectorEncoder(
        modules=modules, device="cpu", prompts=dict(spec.prompts), similarity_fn_name="maxsim"
    )
    model.save(str(target))
    # What the folder says is what the export reads: the prompts exactly as given (the library
    # would add unset query/document entries of its own).
    st_config_path = target / "config_sentence_transformers.json"
    st_config = json.loads(st_config_path.read_text(encoding="utf-8"))
    st_config["prompts"] = dict(spec.prompts)
    st_config_path.write_text(json.dumps(st_config, indent=2) + "\n", encoding="utf-8")


BUILDS = ModelBuilds(
    "harness.multivector_models",
    "multi-vector encoders",
    {model.name: partial(build_multivector_encoder, model) for model in MULTIVECTOR_MODELS},
)
build_in_export_environment = BUILDS.build_in_export_environment


if __name__ == "__main__":
    BUILDS.main(__doc__.splitlines()[0])
