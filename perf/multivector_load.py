"""What perf/multivector.py sends: fixed, seeded requests of one query (about 14 tokens) against 32
distinct documents of about 290 tokens (six consecutive short texts of the workloads' real prose,
perf/workloads.py, about 48 tokens each), as perf/rerank_load.py's requests of about 100-token
documents. The encoding runs send a request's documents; the reranking runs its query too."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer

from perf.rerank_load import DOCUMENTS_PER_REQUEST, SEED, RerankRequest
from perf.workloads import texts

SHORTS_PER_DOCUMENT = 6
# The short texts the prose holds (Python 3.11's pydoc topics), past which texts() starts over:
# 254 distinct documents of six.
PROSE_SHORTS = 1551


def long_document_requests(
    count: int, documents: int = DOCUMENTS_PER_REQUEST, seed: int = SEED
) -> list[RerankRequest]:
    """`count` requests, no document or query repeated within or across them, picked at random
    (seeded)."""
    wanted = count * documents
    shorts = texts("short", PROSE_SHORTS)
    pieces = list(
        dict.fromkeys(
            " ".join(shorts[start : start + SHORTS_PER_DOCUMENT])
            for start in range(0, len(shorts) - SHORTS_PER_DOCUMENT + 1, SHORTS_PER_DOCUMENT)
        )
    )
    queries = list(dict.fromkeys(texts("query", 2 * count)))
    if len(pieces) < wanted or len(queries) < count:
        raise ValueError(
            f"the prose holds {len(pieces)} documents of about 290 tokens, fewer than "
            f"{count} requests of {documents}"
        )
    chooser = random.Random(seed)
    picked = chooser.sample(pieces, wanted)
    return [
        RerankRequest(query, tuple(picked[index * documents : (index + 1) * documents]))
        for index, query in enumerate(chooser.sample(queries, count))
    ]


def mean_tokens(tokenizer_json: str, batch: Sequence[str]) -> float:
    """Mean tokens per text as a model's own tokenizer counts them, special tokens included,
    before any cut."""
    tokenizer = Tokenizer.from_file(tokenizer_json)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return float(np.mean([len(encoding.ids) for encoding in tokenizer.encode_batch(list(batch))]))


def mean_pair_tokens(tokenizer_json: str, pairs: Sequence[tuple[str, str]]) -> float:
    """Mean tokens per (query, document) pair as a cross-encoder's tokenizer reads it, its
    special tokens included, before any cut."""
    tokenizer = Tokenizer.from_file(tokenizer_json)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    encodings = tokenizer.encode_batch(list(pairs))
    return float(np.mean([len(encoding.ids) for encoding in encodings]))
