"""The check against sentence-transformers: the check texts, unprompted and after each prompt,
tokenized as served (the ids must be sentence-transformers' own), then the ONNX graph's
embeddings, batched, one at a time and left-padded where the model pads so, compared with
SentenceTransformer.encode by cosine, and its norm output with the un-normalized vector."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from embed_folder import EmbedSpec
from embedding_head import OUTPUT_NAMES
from engine_choice import MIN_COSINE as FLOAT32_MIN_COSINE
from isolated_graph import IsolatedGraph, onnx_runtime_check
from model_folder import FolderSpec
from optimize_graph import GraphKind
from served_tokenizer import IntArray, pad_batch
from tokenizers import Encoding, Tokenizer

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer, SparseEncoder

FloatArray = npt.NDArray[np.float32]

# int8 embeddings are an opt-in trade with a lower bar; float32 graphs keep 0.9999. Each
# export records its cosine per check text (check_cosines); on an AVX2-only processor:
# perf/results/debian12-2core-zen3-avx2/int8.md.
MIN_COSINE: MappingProxyType[GraphKind, float] = MappingProxyType(
    {"plain": FLOAT32_MIN_COSINE, "fused": FLOAT32_MIN_COSINE, "int8": 0.96}
)

LONG_TEXT = " ".join(
    f"Sentence number {index} talks about embeddings, tokenizers and inference servers."
    for index in range(120)
)
CHECK_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on stage.",
    "How do I reset my password?",
    "Triton Inference Server batches requests dynamically.",
    "Café naïve façade: résumé of the jalapeño crème brûlée.",
    "東京は日本の首都です。",
    "我喜欢在周末读书和喝茶。",
    "안녕하세요, 만나서 반갑습니다.",
    "🎉🚀 Launch day! 😀👍🏽",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "",
    " \t\n  ",
    LONG_TEXT,
)
# Checked once more after each of the model's prompts: a short text, a non-Latin one, the prompt
# alone, and one truncated at the max length with the prompt's tokens counted in.
PROMPTED_CHECK_TEXTS = (CHECK_TEXTS[0], CHECK_TEXTS[2], CHECK_TEXTS[5], "", LONG_TEXT)


@dataclass(frozen=True)
class CheckCase:
    """One self-check text: the text before any prompt, and the prompt put before it."""

    label: str  # its key in check_cosines
    prompt_name: str | None
    text: str


@dataclass(frozen=True)
class CheckSet:
    """The self-check texts as the tokenizer stage encodes them, and what sentence-transformers
    makes of the same texts (L2-normalized), row for row."""

    cases: tuple[CheckCase, ...]
    encodings: tuple[Encoding, ...]
    reference: FloatArray
    pads_left: bool  # the model's tokenizer pads on the left, so its batches are checked so too


@dataclass(frozen=True)
class CheckResult:
    """Outcome of comparing the ONNX graph with sentence-transformers."""

    min_cosine: float
    embedding_dim: int
    num_texts: int
    cosines: dict[str, float]  # per check text (its first 40 characters), the lowest of the runs

    def record(self) -> dict[str, object]:
        """What the bi-encoder's export.json says of the check (its bar is the graph kind's)."""
        return {
            "min_cosine": self.min_cosine,
            "num_check_texts": self.num_texts,
            "check_cosines": self.cosines,
        }


def run_onnx(
    graph: IsolatedGraph, input_ids: IntArray, attention_mask: IntArray
) -> tuple[FloatArray, FloatArray]:
    """Runs the exported graph and returns (embedding, norm)."""
    embedding, norm = graph.run(
        {"input_ids": input_ids, "attention_mask": attention_mask}, list(OUTPUT_NAMES)
    )
    return embedding, norm


def l2_normalize(vectors: FloatArray) -> FloatArray:
    """Row-wise L2 normalization, the same clamp as in the graph."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def row_cosines(left: FloatArray, right: FloatArray) -> FloatArray:
    """Cosine similarity of each row of left with the same row of right."""
    return np.sum(l2_normalize(left) * l2_normalize(right), axis=1)


def check_cases(spec: FolderSpec) -> tuple[CheckCase, ...]:
    """CHECK_TEXTS without a prompt, then PROMPTED_CHECK_TEXTS after each non-empty prompt (an
    empty one is the unprompted text)."""
    cases = [CheckCase(text[:40], None, text) for text in CHECK_TEXTS]
    for name, prompt in spec.prompts.items():
        if prompt:
            cases += [
                CheckCase(f"{name}: {text[:40]}", name, text) for text in PROMPTED_CHECK_TEXTS
            ]
    return tuple(cases)


def served_text(spec: FolderSpec, case: CheckCase) -> str:
    """The text as the tokenizer stage tokenizes it: the prompt, then the text."""
    return (spec.prompts[case.prompt_name] if case.prompt_name else "") + case.text


def prompt_groups(cases: Sequence[CheckCase]) -> dict[str | None, list[int]]:
    """Case indices by prompt name, so that each prompt's texts go to encode() together."""
    groups: dict[str | None, list[int]] = {}
    for index, case in enumerate(cases):
        groups.setdefault(case.prompt_name, []).append(index)
    return groups


def encode_reference(
    model: SentenceTransformer, texts: list[str], prompt_name: str | None, normalize: bool
) -> FloatArray:
    """SentenceTransformer.encode with the named prompt, or with none at all: without
    prompt_name, encode() would apply default_prompt_name, so the unprompted texts pass an
    empty prompt."""
    if prompt_name is None:
        return model.encode(texts, prompt="", convert_to_numpy=True, normalize_embeddings=normalize)
    return model.encode(
        texts, prompt_name=prompt_name, convert_to_numpy=True, normalize_embeddings=normalize
    )


def sentence_transformers_ids(
    model: SentenceTransformer | SparseEncoder, texts: list[str], prompt: str
) -> list[list[int]]:
    """The token ids sentence-transformers feeds the encoder for each text (the prompt put
    before it as encode() puts it), padding removed."""
    features = model.preprocess(texts, prompt=prompt)
    return [
        [int(token) for token, kept in zip(ids, mask, strict=True) if kept]
        for ids, mask in zip(
            features["input_ids"].tolist(), features["attention_mask"].tolist(), strict=True
        )
    ]


def check_token_ids(
    spec: FolderSpec,
    model: SentenceTransformer | SparseEncoder,
    cases: Sequence[CheckCase],
    ours: Sequence[Encoding],
) -> None:
    """Refuses the export unless tokenizer.json, as served, gives the ids sentence-transformers
    gives for every check text, special tokens and truncation included."""
    for prompt_name, indices in prompt_groups(cases).items():
        prompt = spec.prompts[prompt_name] if prompt_name else ""
        expected = sentence_transformers_ids(model, [cases[i].text for i in indices], prompt)
        for index, ids in zip(indices, expected, strict=True):
            served = list(ours[index].ids)
            if served != ids:
                raise SystemExit(
                    f"tokenizer check failed: {spec.transformer_dir / 'tokenizer.json'} "
                    f"(truncation at {spec.max_seq_length}, no padding) gives other ids than "
                    f"sentence-transformers' tokenizer for {cases[index].label!r}: "
                    f"{len(served)} ids {served[:12]}...{served[-4:]} against {len(ids)} ids "
                    f"{ids[:12]}...{ids[-4:]}; nothing was written"
                )
    print(f"tokenizer check: the same ids as sentence-transformers for {len(cases)} texts")


def build_check_set(spec: EmbedSpec, model: SentenceTransformer, tokenizer: Tokenizer) -> CheckSet:
    """Tokenizes the check texts as served, checks the ids against sentence-transformers', and
    encodes them with sentence-transformers, each prompt's texts with that prompt_name."""
    cases = check_cases(spec)
    encodings = tuple(tokenizer.encode_batch([served_text(spec, case) for case in cases]))
    check_token_ids(spec, model, cases, encodings)
    rows: dict[int, FloatArray] = {}
    for prompt_name, indices in prompt_groups(cases).items():
        texts = [cases[i].text for i in indices]
        embeddings = encode_reference(model, texts, prompt_name, normalize=True)
        rows.update(zip(indices, embeddings, strict=True))
    reference = np.stack([rows[index] for index in range(len(cases))])
    tokenizer_padding = getattr(model.tokenizer, "padding_side", "right")
    return CheckSet(cases, encodings, l2_normalize(reference), tokenizer_padding == "left")


def graph_cosines(run: Callable[[IntArray, IntArray], FloatArray], check: CheckSet) -> FloatArray:
    """Per check text, the lowest cosine to sentence-transformers over the graph's runs: all
    texts in one batch padded on the right (as the server pads), each text alone and, where the
    model's tokenizer pads on the left, the batch padded on the left."""
    runs = [
        run(*pad_batch(check.encodings)),
        np.stack([run(*pad_batch([encoding]))[0] for encoding in check.encodings]),
    ]
    if check.pads_left:
        runs.append(run(*pad_batch(check.encodings, left=True)))
    return np.min([row_cosines(embedding, check.reference) for embedding in runs], axis=0)


def check_norm(
    spec: EmbedSpec, model: SentenceTransformer, graph: IsolatedGraph, check: CheckSet
) -> None:
    """Checks embedding * norm against the un-normalized sentence-transformers output of the
    unprompted check texts."""
    if spec.has_normalize:
        print(
            "self-check: norm output not compared (the model's Normalize module hides the final norm)"
        )
        return
    indices = prompt_groups(check.cases)[None]
    embedding, norm = run_onnx(graph, *pad_batch([check.encodings[i] for i in indices]))
    final = encode_reference(model, [check.cases[i].text for i in indices], None, normalize=False)
    if not np.allclose(embedding * norm, final, rtol=1e-3, atol=1e-4):
        error = float(np.max(np.abs(embedding * norm - final)))
        raise SystemExit(
            f"self-check failed: embedding * norm differs from the final vector by up to {error:.3g}"
        )
    print("self-check: embedding * norm matches the final vector")


def self_check(
    onnx_path: Path,
    model: SentenceTransformer,
    check: CheckSet,
    spec: EmbedSpec,
    min_cosine_required: float,
) -> CheckResult:
    """Compares the ONNX graph, batched and one text at a time, with SentenceTransformer.encode."""
    return onnx_runtime_check(
        onnx_path,
        lambda graph: checked_graph(graph, model, check, spec, min_cosine_required),
        "self-check",
    )


def checked_graph(
    graph: IsolatedGraph,
    model: SentenceTransformer,
    check: CheckSet,
    spec: EmbedSpec,
    min_cosine_required: float,
) -> CheckResult:
    cosines = graph_cosines(lambda ids, mask: run_onnx(graph, ids, mask)[0], check)
    min_cosine = float(cosines.min())
    runs = "batched, one at a time" + (" and left-padded" if check.pads_left else "")
    print(f"self-check: min cosine {min_cosine:.7f} over {len(check.cases)} texts ({runs})")
    by_text = {case.label: float(cosine) for case, cosine in zip(check.cases, cosines, strict=True)}
    failing = [(text, cosine) for text, cosine in by_text.items() if cosine < min_cosine_required]
    if failing:
        raise SystemExit(
            f"self-check failed: cosine below {min_cosine_required} for {failing}; nothing was written"
        )
    check_norm(spec, model, graph, check)
    embedding_dim = int(run_onnx(graph, *pad_batch(check.encodings[:1]))[0].shape[1])
    return CheckResult(
        min_cosine=min_cosine,
        embedding_dim=embedding_dim,
        num_texts=len(check.cases),
        cosines=by_text,
    )
