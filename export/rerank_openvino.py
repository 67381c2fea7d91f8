"""export_openvino.py for a reranker: the scorer's ONNX graph (reranker/scorer/1/model.onnx)
converted to OpenVINO IR, checked in each setting against CrossEncoder.predict on the score
check's pairs (score_check.py: unprompted and after each prompt, batched and one at a time), the
first precision within its bound served (bfloat16 first, where the processor runs it; a setting
whose engine dies is refused and the next tried, as openvino_ir.py does for every task); then
ONNX Runtime float32 and OpenVINO in that setting are timed on the same pairs, per thread, and
the faster is recorded (engine_choice.faster_engine), as for a bi-encoder. Writes model.xml and
model.bin beside model.onnx and adds "openvino" to the scorer's export.json; the scorer stage
runs the IR when the launcher serves the reranker on OpenVINO.

The bounds: float32 keeps the ONNX graph's MAX_SCORE_DIFFERENCE. bfloat16 keeps
SPREAD_FRACTION of the spread of the check pairs' reference scores: no score moves by more than
1% of that spread, so two pairs whose scores are 2% of it apart keep their order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from isolated_graph import IsolatedGraph
from model_common.openvino_setting import Setting
from model_folder import read_json
from openvino_ir import Feeds, IrCheck, export_ir, ir_record
from publish import RERANK_LAYOUT, write_atomically
from reference_check import LONG_TEXT, FloatArray
from rerank_folder import read_rerank_spec
from score_check import (
    CHECK_DOCUMENTS,
    CHECK_QUERIES,
    MAX_SCORE_DIFFERENCE,
    PairCheckSet,
    build_pair_check_set,
    score_differences,
)
from served_tokenizer import IntArray, load_tokenizer, pad_inputs
from st_model import load_checked_cross_encoder

SPREAD_FRACTION = 0.01


def score_bounds(reference: FloatArray) -> dict[str, float]:
    """The largest score difference each precision may have to CrossEncoder.predict."""
    spread = float(np.ptp(reference))
    return {
        "f32": MAX_SCORE_DIFFERENCE,
        "bf16": max(MAX_SCORE_DIFFERENCE, SPREAD_FRACTION * spread),
    }


def timing_pairs(tokenizer: Any, names: list[str]) -> dict[str, Feeds]:
    """Eight pairs of a query and a short document, and eight of a query and a document cut
    at the max length."""
    short = [(query, document) for query in CHECK_QUERIES[:4] for document in CHECK_DOCUMENTS[:2]]
    long = [(query, LONG_TEXT) for query in CHECK_QUERIES[:4]] * 2
    return {
        name: pad_inputs(tokenizer.encode_batch(pairs), names)
        for name, pairs in (("short-8", short), ("long-8", long))
    }


def scorer_check(
    check: PairCheckSet, names: list[str], bounds: dict[str, float], timing: dict[str, Feeds]
) -> IrCheck:
    """The reranker's: the max score difference to CrossEncoder.predict, within each
    precision's bound."""

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

    return IrCheck(measure, keeps, report, timing, "pairs")


def export_reranker_ir(repository: Path, model_dir: Path | None) -> None:
    """Converts, checks, times and publishes the reranker's IR in `repository`."""
    scorer = repository / RERANK_LAYOUT.model
    record: dict[str, Any] = read_json(scorer / "export.json")
    spec = read_rerank_spec((model_dir or Path(record["model_dir"])).resolve())
    model = load_checked_cross_encoder(spec)
    tokenizer = load_tokenizer(spec.transformer_dir, spec.max_seq_length)
    names = [str(name) for name in record["inputs"]]
    check = build_pair_check_set(spec, model, tokenizer, "token_type_ids" in names)
    bounds = score_bounds(check.reference)
    ir_check = scorer_check(check, names, bounds, timing_pairs(tokenizer, names))
    export = export_ir(scorer / "model.onnx", scorer, ir_check)
    record["openvino"] = {
        **ir_record(export, "pairs"),
        "max_score_difference_allowed": bounds,
        "max_score_difference": export.choice.measured,
    }
    write_atomically(
        scorer / "export.json",
        lambda temp: temp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8"),
    )
    print(
        f"exported OpenVINO IR of the reranker, setting {export.served.label} "
        f"({export.choice.summary()}), faster engine: {export.faster} -> {scorer}"
    )
