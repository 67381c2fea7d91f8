"""The bi-encoder's OpenVINO IR check (openvino_ir.IrCheck, which export_openvino.py runs): min
cosine >= 0.9999 to sentence-transformers on the original weights over reference_check.py's check
texts (multilingual text, emoji, an empty and a whitespace-only text, a text truncated at the max
length, and some after each of the model's prompts), batched and one text at a time (and batched
with left padding where the model's tokenizer pads on the left), the same bar in every
precision; timed on eight queries, eight short texts and eight texts cut at the max length."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from embed_folder import EmbedSpec
from embedding_head import INPUT_NAMES
from engine_choice import MIN_COSINE, keeps_cosine_bar
from isolated_graph import IsolatedGraph
from model_common.openvino_setting import Setting
from openvino_ir import Feeds, IrCheck
from reference_check import (
    CHECK_TEXTS,
    LONG_TEXT,
    CheckCase,
    CheckSet,
    FloatArray,
    build_check_set,
    graph_cosines,
)
from served_tokenizer import IntArray, pad_inputs
from task_export import Loaded
from tokenizers import Tokenizer

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

# A graph's run on (input_ids, attention_mask): the embeddings.
RunEmbedding = Callable[[IntArray, IntArray], FloatArray]


def embedding_run(graph: IsolatedGraph) -> RunEmbedding:
    return lambda ids, mask: graph.run({"input_ids": ids, "attention_mask": mask}, ["embedding"])[0]


def check_min_cosine(
    run: RunEmbedding, check: CheckSet, bar: float
) -> tuple[float, list[tuple[str, float]]]:
    """The lowest cosine to sentence-transformers over the check texts (reference_check's runs:
    batched, one at a time, left-padded where the tokenizer pads left), and the texts below
    `bar`."""
    cosines = graph_cosines(run, check)
    failing = [
        (case.label, float(cosine))
        for case, cosine in zip(check.cases, cosines, strict=True)
        if cosine < bar
    ]
    return float(cosines.min()), failing


def min_cosine(
    run: RunEmbedding, tokenizer: Tokenizer, reference: FloatArray, bar: float
) -> tuple[float, list[tuple[str, float]]]:
    """check_min_cosine over CHECK_TEXTS alone, with the reference given in their order."""
    check = CheckSet(
        cases=tuple(CheckCase(text[:40], None, text) for text in CHECK_TEXTS),
        encodings=tuple(tokenizer.encode_batch(list(CHECK_TEXTS))),
        reference=reference,
        pads_left=False,
    )
    return check_min_cosine(run, check, bar)


def timing_batches(tokenizer: Tokenizer) -> dict[str, Feeds]:
    """Eight queries (about 14 tokens), eight short texts (about 45) and eight truncated at
    the max length."""
    sentences = [f"{sentence.rstrip('.')}." for sentence in LONG_TEXT.split(". ")]
    query = sentences[:8]
    short = [" ".join(sentences[start : start + 3]) for start in range(0, 24, 3)]
    long = [" ".join(sentences[start:]) for start in range(8)]
    batches = {"query-8": query, "short-8": short, "long-8": long}
    return {
        name: pad_inputs(tokenizer.encode_batch(texts), INPUT_NAMES)
        for name, texts in batches.items()
    }


def embedder_check(loaded: Loaded[EmbedSpec, SentenceTransformer], _: Mapping[str, Any]) -> IrCheck:
    """The bi-encoder's: min cosine to sentence-transformers on reference_check's check texts,
    the same bar in every precision."""
    check = build_check_set(loaded.spec, loaded.model, loaded.tokenizer)

    def measure(graph: IsolatedGraph) -> float:
        cosine, failing = check_min_cosine(embedding_run(graph), check, MIN_COSINE)
        if failing:
            print(f"check: misses cosine {MIN_COSINE} on {failing}")
        return cosine

    def report(setting: Setting, cosine: float) -> str:
        return (
            f"check: {setting.label} min cosine {cosine:.7f} over {len(check.cases)} texts "
            "(batched and one at a time)"
        )

    return IrCheck(
        measure,
        keeps_cosine_bar,
        report,
        timing_batches(loaded.tokenizer),
        unit="texts",
        measure_name="min_cosine",
        bars={"min_cosine_required": MIN_COSINE},
        title="OpenVINO IR",
    )
