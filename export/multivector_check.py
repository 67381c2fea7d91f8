"""The multi-vector encoder's check against sentence-transformers: the check texts (unicode, an
empty and a whitespace-only text, punctuation the skip-list drops, short queries that query
expansion fills, texts past each role's max length), as queries and as documents, tokenized as
the tokenizer stages tokenize them and made into rows by model_common.multivector, the module
the stages build theirs with. Before the export, each text's row must be the one
MultiVectorEncoder feeds its encoder (ids, attention mask) and scores (its MultiVectorMask's
positions). After it, the ONNX graph's vectors at the rows' vector mask, pooled as the encoder
stage pools them where the model has a token pooling (model_common.token_pooling, from the
record's token_pooling, so what is checked is what is served), batched and one text at a time,
must be as many as encode_query / encode_document give for the text (the model's pooling module
applied), each at a cosine of at least MIN_COSINE (0.9999) to its counterpart there."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from engine_choice import MIN_COSINE
from isolated_graph import IsolatedGraph, onnx_runtime_check
from model_common.multivector import QUERY, ROLES, MultiVectorRoles
from model_common.token_pooling import ModelPooling, pool_rows, row_factors
from multivector_folder import MASK_MODULE, MultiVectorSpec
from multivector_rows import role_ids, role_prompt
from reference_check import CHECK_TEXTS, FloatArray
from tokenizers import Tokenizer

if TYPE_CHECKING:
    from sentence_transformers import MultiVectorEncoder

# Beside reference_check.py's texts: ColBERT's skip-list is punctuation, and a query a little
# longer than the usual expansion length, which a fixed expansion cuts and a minimum keeps.
MULTIVECTOR_CHECK_TEXTS = (
    *CHECK_TEXTS,
    "What's the cost (in $, € or ¥) of item #3.14 [per] unit?! -- a lot; 50% off: {yes} & no.",
    "which engines batch requests dynamically across many model instances at once",
)


@dataclass(frozen=True)
class RoleCheck:
    """One role's check texts as served (token ids) and MultiVectorEncoder's vectors of them."""

    role: str
    texts: tuple[str, ...]
    ids: tuple[list[int], ...]
    reference: tuple[FloatArray, ...]  # per text, [vectors, D]

    @property
    def labels(self) -> tuple[str, ...]:
        """Each text's key in the record: the role and its first characters."""
        return tuple(f"{self.role}: {text[:40]}" for text in self.texts)


@dataclass(frozen=True)
class MultiVectorCheckSet:
    roles: MultiVectorRoles
    pooling: ModelPooling | None  # the model's own token pooling, as the encoder stage reads it
    checks: tuple[RoleCheck, ...]


@dataclass(frozen=True)
class MultiVectorCheckResult:
    """Outcome of comparing the ONNX graph's vectors with MultiVectorEncoder's."""

    min_cosine: float
    max_difference: float
    num_texts: int
    num_vectors: int
    # Per check text, the worst over the graph's runs: its vectors, their lowest cosine and
    # their largest absolute difference.
    texts: dict[str, dict[str, int | float]]

    def record(self) -> dict[str, object]:
        """What the multi-vector export.json says of the check, with its bar."""
        return {
            "min_cosine_required": MIN_COSINE,
            "min_cosine": self.min_cosine,
            "max_abs_difference": self.max_difference,
            "num_check_texts": self.num_texts,
            "num_check_vectors": self.num_vectors,
            "check_results": self.texts,
        }

    def summary(self) -> str:
        return (
            f"min_cosine={self.min_cosine:.7f} max_abs_difference={self.max_difference:.2e} "
            f"over {self.num_vectors} vectors of {self.num_texts} texts"
        )


def reference_rows(
    model: MultiVectorEncoder, role: str, prompt: str, text: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One text's row as MultiVectorEncoder builds it: the ids and attention mask its encoder
    reads, the positions that are not padding (the text's and the expansion's) and those its
    MultiVectorMask scores."""
    features = model.preprocess([text], prompt=prompt, task=role)
    attention = features["attention_mask"]
    expanded = features.get("query_expansion_positions")
    real = attention.bool() if expanded is None else attention.bool() | expanded.bool()
    scored = attention.bool()
    masks = [module for module in model if type(module).__name__ == MASK_MODULE]
    if masks:
        scored = masks[0](dict(features), task=role)["attention_mask"]
    return (
        features["input_ids"][0].numpy(),
        attention[0].numpy(),
        real[0].numpy(),
        scored[0].numpy(),
    )


def check_rows(
    model: MultiVectorEncoder, roles: MultiVectorRoles, check: RoleCheck, prompt: str
) -> None:
    """Refuses the export unless each text's served row is MultiVectorEncoder's: the same
    width, ids at every position that is not padding, attention mask and scored positions."""
    for label, text, ids in zip(check.labels, check.texts, check.ids, strict=True):
        rows = roles.rows(check.role, [ids])
        input_ids, attention, real, scored = reference_rows(model, check.role, prompt, text)
        same = (
            rows.input_ids.shape[1] == len(input_ids)
            and (rows.input_ids[0][real] == input_ids[real]).all()
            and (rows.attention_mask[0] == attention).all()
            and (rows.vector_mask[0] == scored).all()
        )
        if not same:
            raise SystemExit(
                f"row check failed: the served row of the {check.role} {label!r} "
                f"(ids {rows.input_ids[0].tolist()}, attention {rows.attention_mask[0].tolist()}, "
                f"vectors {rows.vector_mask[0].tolist()}) is not MultiVectorEncoder's (ids "
                f"{input_ids.tolist()}, attention {attention.astype(int).tolist()}, vectors "
                f"{scored.astype(int).tolist()}); nothing was written"
            )


def encode_reference(model: MultiVectorEncoder, role: str, texts: list[str]) -> list[FloatArray]:
    """encode_query's or encode_document's vectors of the texts, each with its own prompt."""
    encode = model.encode_query if role == QUERY else model.encode_document
    vectors = encode(texts, convert_to_numpy=True, show_progress_bar=False)
    return [np.asarray(each, dtype=np.float32) for each in vectors]


def build_multivector_check_set(
    spec: MultiVectorSpec,
    model: MultiVectorEncoder,
    tokenizer: Tokenizer,
    settings: dict[str, Any],
) -> MultiVectorCheckSet:
    """Tokenizes the check texts per role as served, checks their rows against
    MultiVectorEncoder's, and encodes them with encode_query and encode_document."""
    roles = MultiVectorRoles.from_record(settings)
    # Read as the served stages read the record's entry.
    pooling = ModelPooling.from_record({"token_pooling": spec.token_pooling})
    texts = list(MULTIVECTOR_CHECK_TEXTS)
    checks = []
    for role in ROLES:
        prompt = role_prompt(spec.prompts, role)
        check = RoleCheck(
            role=role,
            texts=tuple(texts),
            ids=tuple(role_ids(tokenizer, roles, prompt, role, texts)),
            reference=tuple(encode_reference(model, role, texts)),
        )
        check_rows(model, roles, check, prompt)
        checks.append(check)
    print(
        f"row check: the served rows are MultiVectorEncoder's for {len(texts)} queries and "
        f"{len(texts)} documents"
    )
    return MultiVectorCheckSet(roles, pooling, tuple(checks))


def run_vectors(
    graph: IsolatedGraph, check: MultiVectorCheckSet, role: str, batch: Sequence[list[int]]
) -> list[FloatArray]:
    """The vectors served of a batch of served ids: the graph's, then pooled by the encoder
    stage's code where the model pools the role, each text's at its served mask."""
    rows = check.roles.rows(role, batch)
    (vectors,) = graph.run({"input_ids": rows.input_ids, "attention_mask": rows.attention_mask})
    factors = np.tile(row_factors(check.pooling, role, None), (len(batch), 1))
    vectors, served = pool_rows(vectors, rows.vector_mask, factors, check.pooling)
    return [row[mask.astype(bool)] for row, mask in zip(vectors, served, strict=True)]


def compare_vectors(ours: FloatArray, theirs: FloatArray) -> tuple[int, float, float]:
    """The vectors' count (-1 where it differs from the reference's), their lowest cosine and
    largest absolute difference to the reference's."""
    if ours.shape != theirs.shape:
        return -1, float("nan"), float("nan")
    if len(ours) == 0:
        return 0, 1.0, 0.0
    norms = np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
    cosines = np.sum(ours * theirs, axis=1) / np.maximum(norms, 1e-12)
    return len(ours), float(cosines.min()), float(np.abs(ours - theirs).max())


def multivector_check(onnx_path: Path, check: MultiVectorCheckSet) -> MultiVectorCheckResult:
    """Compares the ONNX graph's vectors, batched and one text at a time, with
    MultiVectorEncoder's; refuses the export below the bar."""
    return onnx_runtime_check(
        onnx_path, lambda graph: checked_vectors(graph, check), "multi-vector check"
    )


def checked_vectors(graph: IsolatedGraph, check: MultiVectorCheckSet) -> MultiVectorCheckResult:
    texts: dict[str, dict[str, int | float]] = {}
    for role_check in check.checks:
        role = role_check.role
        runs = [
            run_vectors(graph, check, role, role_check.ids),
            [run_vectors(graph, check, role, [ids])[0] for ids in role_check.ids],
        ]
        for index, label in enumerate(role_check.labels):
            reference = role_check.reference[index]
            measures = [compare_vectors(run[index], reference) for run in runs]
            # numpy's min and max, which keep a NaN (Python's would depend on the order).
            texts[label] = {
                "vectors": len(reference) if all(m[0] >= 0 for m in measures) else -1,
                "min_cosine": float(np.min([m[1] for m in measures])),
                "max_abs_difference": float(np.max([m[2] for m in measures])),
            }
    min_cosine = float(np.min([text["min_cosine"] for text in texts.values()]))
    max_difference = float(np.max([text["max_abs_difference"] for text in texts.values()]))
    num_vectors = sum(max(int(text["vectors"]), 0) for text in texts.values())
    print(
        f"multi-vector check: min cosine {min_cosine:.7f}, max abs difference "
        f"{max_difference:.2e} to encode_query / encode_document over {len(texts)} texts "
        f"(batched and one at a time), {num_vectors} vectors"
    )
    # Written so that a NaN cosine fails too.
    failing = {
        label: text
        for label, text in texts.items()
        if text["vectors"] == -1 or not text["min_cosine"] >= MIN_COSINE
    }
    if failing:
        raise SystemExit(
            f"multi-vector check failed: other vector counts than MultiVectorEncoder's (-1), or "
            f"a cosine below {MIN_COSINE}, for {failing}; nothing was written"
        )
    return MultiVectorCheckResult(min_cosine, max_difference, len(texts), num_vectors, texts)
