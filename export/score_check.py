"""The reranker's check against sentence-transformers: the check pairs (several queries, short,
long and unicode documents, some past the max length so truncation matters), unprompted and with
each of the model's prompts before the query, tokenized as served (the ids and token type ids
must be CrossEncoder's own), then the ONNX graph's scores, batched and one pair at a time,
compared with CrossEncoder.predict (with that prompt_name)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from isolated_graph import IsolatedGraph, onnx_runtime_check
from reference_check import LONG_TEXT, FloatArray
from rerank_folder import RerankSpec
from served_tokenizer import IntArray, pad_inputs
from tokenizers import Encoding, Tokenizer

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

MAX_SCORE_DIFFERENCE = 1e-4

CHECK_QUERIES = (
    "How do I reset my password?",
    "What is the capital of France?",
    "東京は日本の首都ですか？",
    "Café crème brûlée 🎉",
    # Longer than the max length: with a long document both sides are cut.
    LONG_TEXT,
)
CHECK_DOCUMENTS = (
    "Paris is the capital of France.",
    "To reset your password, open the settings page and choose 'Forgot password'.",
    "東京は日本の首都です。大阪は食べ物で有名です。",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "🎉🚀 Launch day! 😀👍🏽",
    "",
    LONG_TEXT,
)
CHECK_PAIRS = tuple((query, document) for query in CHECK_QUERIES for document in CHECK_DOCUMENTS)

Pair = tuple[str, str]


@dataclass(frozen=True)
class PairCheckSet:
    """The check pairs as the pair tokenizer encodes them, and CrossEncoder.predict's scores of
    the same pairs, row for row."""

    pairs: tuple[Pair, ...]
    encodings: tuple[Encoding, ...]
    reference: FloatArray  # [pairs]


@dataclass(frozen=True)
class ScoreCheckResult:
    """Outcome of comparing the ONNX graph's scores with CrossEncoder.predict."""

    max_difference: float
    num_pairs: int
    differences: dict[str, float]  # per pair label, the largest over the graph's runs

    def record(self) -> dict[str, object]:
        """What the reranker's export.json says of the check, with its bound."""
        return {
            "max_score_difference_allowed": MAX_SCORE_DIFFERENCE,
            "max_score_difference": self.max_difference,
            "num_check_pairs": self.num_pairs,
            "check_score_differences": self.differences,
        }

    def summary(self) -> str:
        return f"max_score_difference={self.max_difference:.2e} over {self.num_pairs} pairs"


def pair_label(index: int, pair: Pair) -> str:
    """A check pair's key in the record: its index and the first characters of each side."""
    return f"{index}: {pair[0][:24]!r} | {pair[1][:24]!r}"


def cross_encoder_features(model: CrossEncoder, pairs: list[Pair]) -> list[tuple[list[int], ...]]:
    """Per pair, the ids and token type ids CrossEncoder feeds the model (all 0 where its
    tokenizer feeds none, as the model then defaults to), padding removed."""
    features = model.preprocess(pairs)
    input_ids = features["input_ids"].tolist()
    masks = features["attention_mask"].tolist()
    type_rows = (
        features["token_type_ids"].tolist()
        if "token_type_ids" in features
        else [[0] * len(row) for row in input_ids]
    )
    return [
        tuple([int(value) for value, kept in zip(row, mask, strict=True) if kept] for row in rows)
        for mask, *rows in zip(masks, input_ids, type_rows, strict=True)
    ]


def check_pair_token_ids(
    spec: RerankSpec,
    model: CrossEncoder,
    pairs: Sequence[Pair],
    ours: Sequence[Encoding],
    takes_token_types: bool,
) -> None:
    """Refuses the export unless the pair tokenizer gives CrossEncoder's ids for every check
    pair, special tokens and truncation included, and the token type ids the graph feeds the
    model: the served ones where the graph takes them, else the model's all-0 default."""
    expected = cross_encoder_features(model, list(pairs))
    for index, (encoding, theirs_both) in enumerate(zip(ours, expected, strict=True)):
        served_types = list(encoding.type_ids) if takes_token_types else [0] * len(encoding.ids)
        for what, served, theirs in zip(
            ("ids", "token type ids"), (list(encoding.ids), served_types), theirs_both, strict=True
        ):
            if served != theirs:
                raise SystemExit(
                    f"pair tokenizer check failed: {spec.transformer_dir / 'tokenizer.json'} "
                    f"(truncation longest_first at {spec.max_seq_length}, no padding) gives "
                    f"other {what} than CrossEncoder for pair {pair_label(index, pairs[index])}: "
                    f"{len(served)} {served[:12]}...{served[-4:]} against {len(theirs)} "
                    f"{theirs[:12]}...{theirs[-4:]}; nothing was written"
                )
    print(f"pair tokenizer check: the same ids as CrossEncoder for {len(pairs)} pairs")


def predict_reference(
    model: CrossEncoder, pairs: Sequence[Pair], prompt_name: str | None
) -> FloatArray:
    """CrossEncoder.predict's scores with the named prompt, or with none at all: without
    prompt_name, predict() would apply default_prompt_name, so unprompted pairs pass an empty
    prompt."""
    prompt = {"prompt": ""} if prompt_name is None else {"prompt_name": prompt_name}
    scores = model.predict(list(pairs), convert_to_numpy=True, show_progress_bar=False, **prompt)
    return np.asarray(scores, dtype=np.float32)


def build_pair_check_set(
    spec: RerankSpec, model: CrossEncoder, tokenizer: Tokenizer, takes_token_types: bool
) -> PairCheckSet:
    """Tokenizes the check pairs as served, unprompted and after each prompt (its text before
    the query), checks the ids against CrossEncoder's, and scores them with
    CrossEncoder.predict."""
    pairs: list[Pair] = []
    references = []
    for prompt_name in (None, *sorted(spec.prompts)):
        prompt = "" if prompt_name is None else spec.prompts[prompt_name]
        pairs += [(prompt + query, document) for query, document in CHECK_PAIRS]
        references.append(predict_reference(model, CHECK_PAIRS, prompt_name))
    encodings = tuple(tokenizer.encode_batch(pairs))
    check_pair_token_ids(spec, model, pairs, encodings, takes_token_types)
    return PairCheckSet(tuple(pairs), encodings, np.concatenate(references))


# A graph's run: its named inputs -> its scores, [pairs, 1].
RunGraph = Callable[[dict[str, IntArray]], FloatArray]


def run_scores(run: RunGraph, names: Sequence[str], encodings: Sequence[Encoding]) -> FloatArray:
    """The graph's scores ([pairs]) for encodings padded on the right, as the server pads."""
    return run(pad_inputs(encodings, names))[:, 0]


def score_differences(run: RunGraph, names: Sequence[str], check: PairCheckSet) -> FloatArray:
    """Per check pair, the largest difference to CrossEncoder.predict of the graph's scores,
    batched and one pair at a time."""
    runs = [
        run_scores(run, names, check.encodings),
        np.concatenate([run_scores(run, names, [encoding]) for encoding in check.encodings]),
    ]
    return np.max([np.abs(scores - check.reference) for scores in runs], axis=0)


def score_check(onnx_path: Path, check: PairCheckSet) -> ScoreCheckResult:
    """Compares the ONNX graph's scores, batched and one pair at a time, with
    CrossEncoder.predict; refuses the export past MAX_SCORE_DIFFERENCE."""
    return onnx_runtime_check(onnx_path, lambda graph: checked_scores(graph, check), "score check")


def checked_scores(graph: IsolatedGraph, check: PairCheckSet) -> ScoreCheckResult:
    differences = score_differences(lambda feeds: graph.run(feeds)[0], graph.inputs, check)
    max_difference = float(differences.max())
    print(
        f"score check: max difference {max_difference:.2e} to CrossEncoder.predict over "
        f"{len(check.pairs)} pairs (batched and one at a time)"
    )
    by_pair = {
        pair_label(index, pair): float(difference)
        for index, (pair, difference) in enumerate(zip(check.pairs, differences, strict=True))
    }
    # Written so that a NaN score fails too.
    failing = {
        label: value for label, value in by_pair.items() if not value <= MAX_SCORE_DIFFERENCE
    }
    if failing:
        raise SystemExit(
            f"score check failed: scores differ by more than {MAX_SCORE_DIFFERENCE} for "
            f"{failing}; nothing was written"
        )
    return ScoreCheckResult(max_difference, len(check.pairs), by_pair)
