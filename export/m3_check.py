"""The M3 export's check against FlagEmbedding: reference_check.py's check texts (unicode, an
empty and a whitespace-only text, one past the max length), unprompted and after each of the
model's prompts, tokenized as served (the ids must be BGEM3FlagModel's own), then the ONNX
graph's outputs, batched and one text at a time, compared with BGEM3FlagModel.encode (float32,
on CPU, truncating at the folder's max_seq_length) on the original weights:

- dense: `embedding` against dense_vecs;
- sparse: `activations` against lexical_weights densified, every token id's weight (so a term
  active on one side only must weigh under the bound: the relu of a value within rounding of 0);
- ColBERT: `token_vectors` at a row's real tokens but the CLS against colbert_vecs, as many.

Every difference must lie within MAX_DIFFERENCE (1e-4), or the export is refused naming the
worst."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from isolated_graph import IsolatedGraph, onnx_runtime_check
from m3_folder import M3Spec
from m3_head import M3_INPUTS
from reference_check import CheckCase, FloatArray, check_cases, served_text
from served_tokenizer import pad_inputs
from sparse_check import compare_rows
from tokenizers import Encoding, Tokenizer

if TYPE_CHECKING:
    from FlagEmbedding import BGEM3FlagModel

MAX_DIFFERENCE = 1e-4
# The three outputs compared, as the record names their worst differences.
KINDS = ("dense", "sparse", "colbert")


@dataclass(frozen=True)
class M3Reference:
    """BGEM3FlagModel.encode's outputs, row for row: the dense vectors, the lexical weights
    densified [texts, vocab], and each text's ColBERT vectors."""

    dense: FloatArray
    sparse: FloatArray
    colbert: tuple[FloatArray, ...]


@dataclass(frozen=True)
class M3CheckSet:
    """The check texts as the tokenizer stage encodes them, and what BGEM3FlagModel makes of the
    same texts."""

    cases: tuple[CheckCase, ...]
    encodings: tuple[Encoding, ...]
    reference: M3Reference


@dataclass(frozen=True)
class M3CheckResult:
    """Outcome of comparing the ONNX graph's outputs with BGEM3FlagModel.encode."""

    worst: dict[str, float]  # per kind, the largest difference over the texts
    # Per check text, the worst over the graph's runs: each kind's difference, the lexical
    # weights' terms, the terms active on one side only (all within the bound), the vectors.
    texts: dict[str, dict[str, int | float]]

    def record(self) -> dict[str, object]:
        """What the M3 export.json says of the check, with its bound."""
        return {
            "max_difference_allowed": MAX_DIFFERENCE,
            **{f"max_{kind}_difference": self.worst[kind] for kind in KINDS},
            "num_check_texts": len(self.texts),
            "check_results": self.texts,
        }

    def summary(self) -> str:
        differences = " ".join(f"max_{kind}_difference={self.worst[kind]:.2e}" for kind in KINDS)
        return f"{differences} over {len(self.texts)} texts"


def encode_reference(model: BGEM3FlagModel, texts: list[str], spec: M3Spec) -> M3Reference:
    """BGEM3FlagModel.encode's three outputs of the texts, truncated at the max length."""
    encoded = model.encode(
        texts,
        max_length=spec.max_seq_length,
        return_dense=True,
        return_sparse=True,
        return_colbert_vecs=True,
    )
    sparse = np.zeros((len(texts), spec.vocab_size), np.float32)
    for row, weights in enumerate(encoded["lexical_weights"]):
        for token_id, weight in weights.items():
            sparse[row, int(token_id)] = weight
    return M3Reference(
        np.asarray(encoded["dense_vecs"], np.float32),
        sparse,
        tuple(np.asarray(vectors, np.float32) for vectors in encoded["colbert_vecs"]),
    )


def check_m3_token_ids(
    spec: M3Spec, model: BGEM3FlagModel, texts: list[str], ours: Sequence[Encoding]
) -> None:
    """Refuses the export unless tokenizer.json, as served, gives the ids BGEM3FlagModel's
    tokenizer gives every check text, special tokens and truncation included."""
    theirs = model.tokenizer(texts, truncation=True, max_length=spec.max_seq_length)["input_ids"]
    for text, encoding, ids in zip(texts, ours, theirs, strict=True):
        if list(encoding.ids) != list(ids):
            raise SystemExit(
                f"tokenizer check failed: {spec.transformer_dir / 'tokenizer.json'} (truncation "
                f"at {spec.max_seq_length}, no padding) gives other ids than BGEM3FlagModel's "
                f"tokenizer for {text[:40]!r}: {list(encoding.ids)[:12]}... against "
                f"{list(ids)[:12]}...; nothing was written"
            )
    print(f"tokenizer check: the same ids as BGEM3FlagModel for {len(texts)} texts")


def build_m3_check_set(spec: M3Spec, model: BGEM3FlagModel, tokenizer: Tokenizer) -> M3CheckSet:
    """Tokenizes the check texts as served (each prompt before its texts, as the tokenizer stage
    puts it), checks the ids against BGEM3FlagModel's and encodes the same texts with it."""
    cases = check_cases(spec)
    texts = [served_text(spec, case) for case in cases]
    encodings = tuple(tokenizer.encode_batch(texts))
    check_m3_token_ids(spec, model, texts, encodings)
    return M3CheckSet(cases, encodings, encode_reference(model, texts, spec))


def run_outputs(graph: IsolatedGraph, encodings: Sequence[Encoding]) -> list[np.ndarray]:
    """The graph's four outputs for encodings padded on the right, as the server pads."""
    return graph.run(pad_inputs(encodings, M3_INPUTS))


def compare_run(outputs: list[np.ndarray], check: M3CheckSet) -> list[dict[str, int | float]]:
    """Per text, each kind's largest difference between one run of the graph and the
    reference, with the sparse terms' and the ColBERT vectors' counts."""
    embedding, _, activations, token_vectors = outputs
    reference = check.reference
    dense = np.abs(embedding - reference.dense).max(axis=1)
    # A term active on one side only differs by its weight, which the bound holds below 1e-4.
    sparse, one_sided, _ = compare_rows(activations, reference.sparse)
    measures = []
    for row, encoding in enumerate(check.encodings):
        # Every real token but the CLS at position 0, as BGEM3FlagModel keeps them.
        ours = token_vectors[row, 1 : len(encoding.ids)]
        theirs = reference.colbert[row]
        colbert = (
            float(np.abs(ours - theirs).max(initial=0.0)) if ours.shape == theirs.shape else np.inf
        )
        measures.append(
            {
                "dense_difference": float(dense[row]),
                "sparse_terms": int((reference.sparse[row] > 0).sum()),
                "one_sided_terms": int(one_sided[row]),
                "sparse_difference": float(sparse[row]),
                "colbert_vectors": len(theirs),
                "colbert_difference": colbert,
            }
        )
    return measures


def m3_check(onnx_path: Path, check: M3CheckSet) -> M3CheckResult:
    """Compares the ONNX graph's outputs, batched and one text at a time, with
    BGEM3FlagModel.encode; refuses the export past MAX_DIFFERENCE."""
    return onnx_runtime_check(onnx_path, lambda graph: checked_outputs(graph, check), "M3 check")


def checked_outputs(graph: IsolatedGraph, check: M3CheckSet) -> M3CheckResult:
    batched = compare_run(run_outputs(graph, check.encodings), check)
    # One text at a time too, each padded to its own length only, as the server may batch it.
    alone = [
        compare_run(run_outputs(graph, [encoding]), single_check(check, row))[0]
        for row, encoding in enumerate(check.encodings)
    ]
    texts = {
        case.label: {key: max(batched[row][key], alone[row][key]) for key in batched[row]}
        for row, case in enumerate(check.cases)
    }
    worst = {kind: max(text[f"{kind}_difference"] for text in texts.values()) for kind in KINDS}
    print(
        "M3 check: "
        + ", ".join(f"max {kind} difference {worst[kind]:.2e}" for kind in KINDS)
        + f" to BGEM3FlagModel.encode over {len(texts)} texts (batched and one at a time)"
    )
    # Written so that a NaN difference fails too.
    failing = {
        label: text
        for label, text in texts.items()
        if not all(text[f"{kind}_difference"] <= MAX_DIFFERENCE for kind in KINDS)
    }
    if failing:
        raise SystemExit(
            f"M3 check failed: differences to BGEM3FlagModel.encode past {MAX_DIFFERENCE} "
            f"(worst: {worst}; inf: a text's vectors not as many) for {failing}; nothing was "
            "written"
        )
    return M3CheckResult(worst, texts)


def single_check(check: M3CheckSet, row: int) -> M3CheckSet:
    """The check set of one of its texts."""
    reference = check.reference
    return M3CheckSet(
        check.cases[row : row + 1],
        check.encodings[row : row + 1],
        M3Reference(
            reference.dense[row : row + 1],
            reference.sparse[row : row + 1],
            reference.colbert[row : row + 1],
        ),
    )
