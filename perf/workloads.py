"""Deterministic benchmark workloads cut from real English prose (the
documentation text Python's standard library carries in pydoc_data), and
their perf_analyzer `--input-data` files.

Queries hold 8-14 tokens (search queries, titles: most real embedding
traffic), short texts about 50, long ones about 512 (all counting [CLS] and
[SEP], by the model's own tokenizer.json). The default model keeps
only the first 256 tokens of a long text, so a workload records both counts:
`mean_tokens` (what the model computes on) and `mean_untruncated_tokens`.

perf_analyzer builds a request of B rows from B consecutive `data` entries
and starts request k at entry k*B (when the entry count is a multiple of B),
so each entry here is one text and the runs use `-b texts_per_request`.
"""

from __future__ import annotations

import json
import pydoc_data.topics
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from statistics import fmean
from typing import Literal

from tokenizers import Tokenizer

from server.paths import TOKENIZER_JSON

Kind = Literal["query", "short", "long"]
TARGET_TOKENS: dict[Kind, int] = {"query": 14, "short": 50, "long": 512}
SPECIAL_TOKENS = 2  # [CLS] and [SEP]
DEFAULT_REQUESTS = 32


@dataclass(frozen=True)
class Workload:
    kind: Kind
    texts_per_request: int
    requests: list[list[str]]
    mean_tokens: float  # per text, after the model's truncation, with special tokens
    mean_untruncated_tokens: float

    @property
    def text_count(self) -> int:
        return len(self.requests) * self.texts_per_request

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.texts_per_request}"


def _prose_paragraphs() -> list[str]:
    """Paragraphs of running text: code samples, grammar rules, headings
    and tables are left out."""
    paragraphs = []
    for key in sorted(pydoc_data.topics.topics):
        for block in re.split(r"\n\s*\n", pydoc_data.topics.topics[key]):
            paragraph = " ".join(block.split())
            if (
                len(paragraph.split()) < 8
                or ">>>" in paragraph
                or "::=" in paragraph
                or not paragraph.endswith((".", ":"))
            ):
                continue
            letters = sum(char.isalpha() or char.isspace() for char in paragraph)
            if letters / len(paragraph) >= 0.85:
                paragraphs.append(paragraph)
    return paragraphs


@cache
def _untruncating_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(TOKENIZER_JSON))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


@cache
def model_tokenizer() -> Tokenizer:
    """The server's tokenizer as it is: truncating at the model's max length."""
    tokenizer = Tokenizer.from_file(str(TOKENIZER_JSON))
    if tokenizer.truncation is None:
        raise ValueError(f"{TOKENIZER_JSON} sets no truncation; re-run the export")
    tokenizer.no_padding()
    return tokenizer


@cache
def _text_pool(kind: Kind) -> tuple[str, ...]:
    """Consecutive slices of the prose, each ending at a word boundary so
    it holds at most the target token count."""
    prose = " ".join(_prose_paragraphs())
    encoding = _untruncating_tokenizer().encode(prose, add_special_tokens=False)
    offsets = encoding.offsets  # each attribute read converts the whole list
    starts_word = [not token.startswith("##") for token in encoding.tokens]
    body = TARGET_TOKENS[kind] - SPECIAL_TOKENS
    pool = []
    start = 0
    while True:
        while start < len(starts_word) and not starts_word[start]:
            start += 1
        end = start + body
        if end >= len(starts_word):
            break
        while not starts_word[end]:
            end -= 1
        pool.append(prose[offsets[start][0] : offsets[end - 1][1]])
        start = end
    return tuple(pool)


def texts(kind: Kind, count: int) -> list[str]:
    """The first `count` texts of that kind; past the end of the prose
    (about 1400 short or 140 long texts) they repeat in the same order."""
    if kind not in TARGET_TOKENS:
        raise ValueError(f"kind must be one of {sorted(TARGET_TOKENS)}, not {kind!r}")
    pool = _text_pool(kind)
    return [pool[index % len(pool)] for index in range(count)]


def token_counts(batch: list[str], *, truncate: bool = True) -> list[int]:
    """Tokens per text, special tokens included, as the server counts them
    (truncate=True) or before truncation."""
    tokenizer = model_tokenizer() if truncate else _untruncating_tokenizer()
    return [len(encoding.ids) for encoding in tokenizer.encode_batch(batch)]


def workload(kind: Kind, texts_per_request: int, requests: int = DEFAULT_REQUESTS) -> Workload:
    if texts_per_request < 1 or requests < 1:
        raise ValueError("texts_per_request and requests must be at least 1")
    picked = texts(kind, requests * texts_per_request)
    return Workload(
        kind=kind,
        texts_per_request=texts_per_request,
        requests=[
            picked[index : index + texts_per_request]
            for index in range(0, len(picked), texts_per_request)
        ],
        mean_tokens=fmean(token_counts(picked)),
        mean_untruncated_tokens=fmean(token_counts(picked, truncate=False)),
    )


def write_text_input_data(workload: Workload, path: Path) -> Path:
    """perf_analyzer input for `embed`: one entry per text (TEXT, BYTES, [1]
    per row); run with `-b workload.texts_per_request`."""
    entries = [{"TEXT": [text]} for request in workload.requests for text in request]
    path.write_text(json.dumps({"data": entries}))
    return path


def write_token_input_data(
    workload: Workload, path: Path, tokenizer: Tokenizer | None = None
) -> Path:
    """perf_analyzer input for `embed_tokens`: one entry per text with its
    ids and mask (INT64) by `tokenizer` (default: the served model's), each
    request's rows padded with id 0 / mask 0 to that request's longest row,
    as the embed_tokens contract asks; run with `-b workload.texts_per_request`."""
    tokenizer = tokenizer or model_tokenizer()
    entries = []
    for request in workload.requests:
        ids = [encoding.ids for encoding in tokenizer.encode_batch(request)]
        width = max(len(row) for row in ids)
        for row in ids:
            padding = [0] * (width - len(row))
            entries.append(
                {
                    "INPUT_IDS": {"content": row + padding, "shape": [width]},
                    "ATTENTION_MASK": {"content": [1] * len(row) + padding, "shape": [width]},
                }
            )
    path.write_text(json.dumps({"data": entries}))
    return path
