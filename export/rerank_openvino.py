"""The reranker's OpenVINO IR check (openvino_ir.IrCheck, which export_openvino.py runs): the
scorer's ONNX graph (reranker/scorer/1/model.onnx) converted to OpenVINO IR, checked in each
setting against CrossEncoder.predict on the score check's pairs (score_check.py: unprompted and
after each prompt, batched and one at a time), the first precision within its bound served
(bfloat16 first, where the processor runs it; a setting whose engine dies is refused and the
next tried, as openvino_ir.py does for every task); then ONNX Runtime float32 and OpenVINO in
that setting are timed on the same pairs, per thread, and the faster is recorded
(engine_choice.faster_engine), as for a bi-encoder. Its IR goes beside model.onnx (the catalog's
RERANK.openvino_version), and "openvino" into the scorer's export.json; the scorer stage runs
the IR when the launcher serves the reranker on OpenVINO.

The bounds: float32 keeps the ONNX graph's MAX_SCORE_DIFFERENCE. bfloat16 keeps
SPREAD_FRACTION of the spread of the check pairs' reference scores: no score moves by more than
1% of that spread, so two pairs whose scores are 2% of it apart keep their order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from isolated_graph import IsolatedGraph
from model_common.openvino_setting import Setting
from openvino_ir import Feeds, IrCheck
from reference_check import LONG_TEXT, FloatArray
from rerank_folder import RerankSpec
from score_check import (
    CHECK_DOCUMENTS,
    CHECK_QUERIES,
    MAX_SCORE_DIFFERENCE,
    build_pair_check_set,
    score_differences,
)
from served_tokenizer import IntArray, pad_inputs
from task_export import Loaded
from tokenizers import Tokenizer

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

SPREAD_FRACTION = 0.01


def score_bounds(reference: FloatArray) -> dict[str, float]:
    """The largest score difference each precision may have to CrossEncoder.predict."""
    spread = float(np.ptp(reference))
    return {
        "f32": MAX_SCORE_DIFFERENCE,
        "bf16": max(MAX_SCORE_DIFFERENCE, SPREAD_FRACTION * spread),
    }


def timing_pairs(tokenizer: Tokenizer, names: list[str]) -> dict[str, Feeds]:
    """Eight pairs of a query and a short document, and eight of a query and a document cut
    at the max length."""
    short = [(query, document) for query in CHECK_QUERIES[:4] for document in CHECK_DOCUMENTS[:2]]
    long = [(query, LONG_TEXT) for query in CHECK_QUERIES[:4]] * 2
    return {
        name: pad_inputs(tokenizer.encode_batch(pairs), names)
        for name, pairs in (("short-8", short), ("long-8", long))
    }


def scorer_check(
    loaded: Loaded[RerankSpec, CrossEncoder], onnx_record: Mapping[str, Any]
) -> IrCheck:
    """The reranker's: the max score difference to CrossEncoder.predict on the score check's
    pairs, fed the inputs the ONNX graph takes, within each precision's bound."""
    names = [str(name) for name in onnx_record["inputs"]]
    check = build_pair_check_set(
        loaded.spec, loaded.model, loaded.tokenizer, "token_type_ids" in names
    )
    bounds = score_bounds(check.reference)

    def measure(graph: IsolatedGraph) -> float:
        def run(feeds: dict[str, IntArray]) -> FloatArray:
            return graph.run(feeds, ["score"])[0]

        return float(score_differences(run, names, check).max())

    def keeps(precision: str, difference: float) -> bool:
        # Written so that a NaN score misses too.
        return difference <= bounds[precision]

    def report(setting: Setting, difference: float) -> str:
        bound = bounds[setting.precision]
        verdict = "kept" if keeps(setting.precision, difference) else "missed"
        return (
            f"check: {setting.label} max score difference {difference:.2e} to "
            f"CrossEncoder.predict over {len(check.pairs)} pairs, bound {bound:.2e}: {verdict}"
        )

    return IrCheck(
        measure,
        keeps,
        report,
        timing_pairs(loaded.tokenizer, names),
        unit="pairs",
        measure_name="max_score_difference",
        bars={"max_score_difference_allowed": bounds},
        title="OpenVINO IR of the reranker",
    )
