"""A tiny random-weight BGE-M3-shaped folder, so the M3 export and serving can be tested without
a model hub: bge_m3, the XLM-RoBERTa family's folder (harness/family_models.py) with BGE-M3's
sentence-transformers modules (CLS pooling, Normalize, no prompts), and beside it the two heads
FlagEmbedding's BGEM3FlagModel loads: colbert_linear.pt (hidden -> hidden) and sparse_linear.pt
(hidden -> 1), each a torch.nn.Linear's state_dict.

    .venv-export/bin/python -m harness.m3_models OUT_DIR

Needs the export environment (torch, transformers, sentence-transformers). The build is seeded:
the same versions write the same weights and vocabularies.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from embedding_catalog.tasks import COLBERT_HEAD, SPARSE_HEAD

from harness.family_models import FAMILIES, HIDDEN, SEED, build_family
from harness.model_builds import ModelBuilds

NAME = "bge_m3"
# Without it the sparse head's output on the random encoder's hidden states centres a little
# below 0; with it about half the tokens' weights are positive (relu zeroes the rest), so the
# check meets both kinds.
SPARSE_BIAS = 0.2

M3_FAMILY = dataclasses.replace(
    next(family for family in FAMILIES if family.name == "xlmr"),
    name=NAME,
    pooling="cls",
    normalize=True,
    dense_out=None,
    prompts={},
    default_prompt_name=None,
)


def build_m3(out_dir: Path) -> Path:
    """Writes the BGE-M3-shaped folder to out_dir / bge_m3."""
    import torch

    target = build_family(M3_FAMILY, out_dir)
    # Seeded apart from the encoder's, so the heads do not depend on how it was built.
    torch.manual_seed(SEED + 1)
    colbert = torch.nn.Linear(HIDDEN, HIDDEN)
    sparse = torch.nn.Linear(HIDDEN, 1)
    with torch.no_grad():
        sparse.bias.fill_(SPARSE_BIAS)
    torch.save(colbert.state_dict(), target / COLBERT_HEAD)
    torch.save(sparse.state_dict(), target / SPARSE_HEAD)
    return target


BUILDS = ModelBuilds("harness.m3_models", "BGE-M3 models", {NAME: build_m3})
build_in_export_environment = BUILDS.build_in_export_environment


if __name__ == "__main__":
    BUILDS.main(__doc__.splitlines()[0])
