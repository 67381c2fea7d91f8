"""The sparse encoder's check against sentence-transformers: reference_check.py's check texts
(unicode, an empty and a whitespace-only text, one past the max length), unprompted and after
each of the model's prompts, tokenized as served (the ids must be SparseEncoder's own), then the
ONNX graph's activations, batched and one text at a time, compared with SparseEncoder.encode on
the original weights (its sparse rows densified, every activation kept: no max_active_dims).

The rule, per text and per run: every value lies within MAX_VALUE_DIFFERENCE (1e-4) of
SparseEncoder's, and the active terms (the indices whose value is > 0) are the same on both sides,
except that a term whose value is below ACTIVE_TERM_FLOOR (1e-4) may be active on one side only:
relu of a logit within float rounding of 0 is 0 on one side and a few 1e-7 on the other."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from isolated_graph import IsolatedGraph, onnx_runtime_check
from reference_check import (
    CheckCase,
    FloatArray,
    check_cases,
    check_token_ids,
    prompt_groups,
    served_text,
)
from served_tokenizer import pad_inputs
from sparse_folder import SparseSpec
from sparse_head import SPARSE_INPUTS
from tokenizers import Encoding, Tokenizer

if TYPE_CHECKING:
    from sentence_transformers import SparseEncoder

MAX_VALUE_DIFFERENCE = 1e-4
ACTIVE_TERM_FLOOR = 1e-4


@dataclass(frozen=True)
class SparseCheckSet:
    """The check texts as the tokenizer stage encodes them, and SparseEncoder.encode's dense rows
    of the same texts, row for row."""

    cases: tuple[CheckCase, ...]
    encodings: tuple[Encoding, ...]
    reference: FloatArray  # [texts, vocab]


@dataclass(frozen=True)
class SparseCheckResult:
    """Outcome of comparing the ONNX graph's activations with SparseEncoder.encode."""

    max_difference: float
    num_texts: int
    # Per check text, the worst over the graph's runs: SparseEncoder's active terms, the terms
    # active on one side only (all below the floor) and the largest value difference.
    texts: dict[str, dict[str, int | float]]

    def record(self) -> dict[str, object]:
        """What the sparse encoder's export.json says of the check, with its bound."""
        return {
            "max_value_difference_allowed": MAX_VALUE_DIFFERENCE,
            "max_value_difference": self.max_difference,
            "num_check_texts": self.num_texts,
            "check_results": self.texts,
        }

    def summary(self) -> str:
        return f"max_value_difference={self.max_difference:.2e} over {self.num_texts} texts"


def encode_reference(model: SparseEncoder, texts: list[str], prompt_name: str | None) -> FloatArray:
    """SparseEncoder.encode's rows, densified, with the named prompt or with none at all:
    without prompt_name, encode() would apply default_prompt_name, so the unprompted texts pass
    an empty prompt."""
    prompt = {"prompt": ""} if prompt_name is None else {"prompt_name": prompt_name}
    rows = model.encode(texts, convert_to_tensor=True, show_progress_bar=False, **prompt)
    return rows.to_dense().numpy().astype(np.float32)


def build_sparse_check_set(
    spec: SparseSpec, model: SparseEncoder, tokenizer: Tokenizer
) -> SparseCheckSet:
    """Tokenizes the check texts as served, checks the ids against SparseEncoder's, and encodes
    them with SparseEncoder, each prompt's texts with that prompt_name."""
    cases = check_cases(spec)
    encodings = tuple(tokenizer.encode_batch([served_text(spec, case) for case in cases]))
    check_token_ids(spec, model, cases, encodings)
    rows: dict[int, FloatArray] = {}
    for prompt_name, indices in prompt_groups(cases).items():
        texts = [cases[index].text for index in indices]
        rows.update(zip(indices, encode_reference(model, texts, prompt_name), strict=True))
    return SparseCheckSet(cases, encodings, np.stack([rows[i] for i in range(len(cases))]))


def run_activations(graph: IsolatedGraph, encodings: Sequence[Encoding]) -> FloatArray:
    """The graph's activations for encodings padded on the right, as the server pads."""
    (activations,) = graph.run(pad_inputs(encodings, SPARSE_INPUTS))
    return activations


def compare_rows(ours: FloatArray, theirs: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per row: the largest value difference, the terms active on one side only, and those of
    them at or above the floor (which fail the check)."""
    one_sided = (ours > 0) != (theirs > 0)
    above_floor = one_sided & (np.maximum(ours, theirs) >= ACTIVE_TERM_FLOOR)
    return np.abs(ours - theirs).max(axis=1), one_sided.sum(axis=1), above_floor.sum(axis=1)


def sparse_check(onnx_path: Path, check: SparseCheckSet) -> SparseCheckResult:
    """Compares the ONNX graph's activations, batched and one text at a time, with
    SparseEncoder.encode; refuses the export past the module's rule."""
    return onnx_runtime_check(onnx_path, lambda graph: checked_rows(graph, check), "sparse check")


def checked_rows(graph: IsolatedGraph, check: SparseCheckSet) -> SparseCheckResult:
    runs = [
        run_activations(graph, check.encodings),
        np.concatenate([run_activations(graph, [encoding]) for encoding in check.encodings]),
    ]
    if any(run.shape != check.reference.shape for run in runs):
        raise SystemExit(
            f"sparse check failed: the graph's activations are {runs[0].shape}, SparseEncoder's "
            f"{check.reference.shape}; nothing was written"
        )
    differences, one_sided, above_floor = (
        np.max(measures, axis=0)
        for measures in zip(*(compare_rows(run, check.reference) for run in runs), strict=True)
    )
    active = (check.reference > 0).sum(axis=1)
    texts = {
        case.label: {
            "active_terms": int(active[index]),
            "one_sided_terms": int(one_sided[index]),
            "max_value_difference": float(differences[index]),
        }
        for index, case in enumerate(check.cases)
    }
    max_difference = float(differences.max())
    print(
        f"sparse check: max value difference {max_difference:.2e} to SparseEncoder.encode over "
        f"{len(check.cases)} texts (batched and one at a time), {int(active.sum())} active terms"
    )
    # Written so that a NaN value fails too.
    failing = {
        case.label: texts[case.label]
        for index, case in enumerate(check.cases)
        if not differences[index] <= MAX_VALUE_DIFFERENCE or above_floor[index] > 0
    }
    if failing:
        raise SystemExit(
            f"sparse check failed: values differ by more than {MAX_VALUE_DIFFERENCE}, or terms "
            f"at or above {ACTIVE_TERM_FLOOR} are active on one side only, for {failing}; "
            "nothing was written"
        )
    return SparseCheckResult(max_difference, len(check.cases), texts)
