"""export_openvino.py for a reranker: the scorer's ONNX graph (reranker/scorer/1/model.onnx)
converted to OpenVINO IR, checked in each precision against CrossEncoder.predict on the score
check's pairs (score_check.py: unprompted and after each prompt, batched and one at a time), the
first precision within its bound served (bfloat16 first, where the processor runs it); then ONNX
Runtime float32 and OpenVINO in that precision are timed on the same pairs, one thread each, and
the faster is recorded (engine_choice.faster_engine), as for a bi-encoder. Writes model.xml and
model.bin beside model.onnx and adds "openvino" to the scorer's export.json; the scorer stage
runs the IR when the launcher serves the reranker on OpenVINO.

The bounds: float32 keeps the ONNX graph's MAX_SCORE_DIFFERENCE. bfloat16 keeps
SPREAD_FRACTION of the spread of the check pairs' reference scores: no score moves by more than
1% of that spread, so two pairs whose scores are 2% of it apart keep their order.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from engine_choice import choose_precision, faster_engine, precision_candidates
from model_folder import read_json
from openvino_ir import (
    compile_for,
    convert,
    engine_speeds,
    has_bfloat16,
    one_thread_session,
    publish_ir,
)
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

Feeds = dict[str, IntArray]


def score_bounds(reference: FloatArray) -> dict[str, float]:
    """The largest score difference each precision may have to CrossEncoder.predict."""
    spread = float(np.ptp(reference))
    return {
        "f32": MAX_SCORE_DIFFERENCE,
        "bf16": max(MAX_SCORE_DIFFERENCE, SPREAD_FRACTION * spread),
    }


def run_ir(compiled: ov.CompiledModel) -> Any:
    output = compiled.output("score")
    return lambda feeds: compiled(feeds)[output]


def timing_pairs(tokenizer: Any, names: list[str]) -> dict[str, Feeds]:
    """Eight pairs of a query and a short document, and eight of a query and a document cut
    at the max length."""
    short = [(query, document) for query in CHECK_QUERIES[:4] for document in CHECK_DOCUMENTS[:2]]
    long = [(query, LONG_TEXT) for query in CHECK_QUERIES[:4]] * 2
    return {
        name: pad_inputs(tokenizer.encode_batch(pairs), names)
        for name, pairs in (("short-8", short), ("long-8", long))
    }


def measure_precisions(
    core: ov.Core, model_xml: Path, names: list[str], check: PairCheckSet
) -> tuple[dict[str, ov.CompiledModel], Any, dict[str, float]]:
    """Each candidate precision compiled and checked in turn, bfloat16 first; the compiled
    models, the choice and the bounds."""
    bounds = score_bounds(check.reference)
    compiled: dict[str, ov.CompiledModel] = {}

    def measure(precision: str) -> float:
        compiled[precision] = compile_for(core, model_xml, precision)
        difference = float(score_differences(run_ir(compiled[precision]), names, check).max())
        verdict = "kept" if difference <= bounds[precision] else "missed"
        print(
            f"check: {precision} max score difference {difference:.2e} to CrossEncoder.predict "
            f"over {len(check.pairs)} pairs, bound {bounds[precision]:.2e}: {verdict}"
        )
        return difference

    choice = choose_precision(
        precision_candidates(has_bfloat16(core)),
        measure,
        # Written so that a NaN score misses too.
        keeps=lambda precision, difference: difference <= bounds[precision],
    )
    return compiled, choice, bounds


def export_reranker_ir(repository: Path, model_dir: Path | None) -> None:
    """Converts, checks, times and publishes the reranker's IR in `repository`."""
    scorer = repository / RERANK_LAYOUT.model
    record: dict[str, Any] = read_json(scorer / "export.json")
    spec = read_rerank_spec((model_dir or Path(record["model_dir"])).resolve())
    model = load_checked_cross_encoder(spec)
    tokenizer = load_tokenizer(spec.transformer_dir, spec.max_seq_length)
    names = [str(name) for name in record["inputs"]]
    check = build_pair_check_set(spec, model, tokenizer, "token_type_ids" in names)
    core = ov.Core()
    with tempfile.TemporaryDirectory(prefix="export_openvino_") as workdir:
        model_xml = convert(scorer / "model.onnx", Path(workdir))
        compiled, choice, bounds = measure_precisions(core, model_xml, names, check)
        if choice.served is None:
            raise SystemExit(
                f"no precision kept its score bound {bounds}: {choice.measured}; nothing was "
                "written"
            )
        session = one_thread_session(scorer / "model.onnx")
        engines = {
            "onnxruntime": lambda feeds: session.run(None, feeds),
            "openvino": run_ir(compiled[choice.served]),
        }
        speeds = engine_speeds(
            engines, timing_pairs(tokenizer, names), lambda feeds: feeds["input_ids"].shape[0]
        )
        faster = faster_engine(speeds)
        for name, rates in speeds.items():
            print(f"timing: {name} " + ", ".join(f"{b} {r:.1f} pairs/s" for b, r in rates.items()))
        record["openvino"] = {
            "precision": choice.served,
            "max_score_difference_allowed": bounds,
            "max_score_difference": choice.measured,
            "processor_capabilities": list(core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")),
            "version": ov.get_version(),
            "pairs_per_s_one_thread": speeds,
            "faster_engine": faster,
        }
        publish_ir(model_xml, scorer)
        write_atomically(
            scorer / "export.json",
            lambda temp: temp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8"),
        )
    refused = ", ".join(f"{p} {value:.2e}" for p, value in choice.refused().items())
    print(
        f"exported OpenVINO IR of the reranker, precision {choice.served} (refused: "
        f"{refused or 'none'}), faster engine: {faster} -> {scorer}"
    )
