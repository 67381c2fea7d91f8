"""Convert the exported ONNX graph to OpenVINO IR for the OpenVINO CPU embedder.

Reads what export/export_onnx.py wrote (<repository>/onnx_cpu/embedder/1/model.onnx and its
export.json), converts the graph to IR (float32 weights), and checks it in the precision it
will be served in against sentence-transformers on the original weights: min cosine >= 0.9999
over reference_check.py's check texts (multilingual text, emoji, an empty and a whitespace-only
text, a text truncated at the max length, and some after each of the model's prompts), batched
and one text at a time (and batched with left padding where the model's tokenizer pads on the
left). The weights folder is the one the ONNX record names unless --model-dir says otherwise.
bfloat16 is checked first where the processor runs it; if it misses the bar, the export says
so and records float32, which the server then serves. Then it times ONNX Runtime float32
against OpenVINO in that precision on the same batches, one thread each, and records which to
serve (faster_engine): the launcher serves that CPU embedder by default. On success it writes,
each file atomically:

    <repository>/openvino_cpu/embedder/1/model.xml, model.bin
    <repository>/openvino_cpu/embedder/1/export.json   (the ONNX record, plus "openvino")

Bi-encoders only: a repository holding a reranker's export (reranker/scorer/) or a sparse
encoder's (sparse/encoder/), or a reranker's or a sparse encoder's weights folder, is refused with
a message saying so (sparse encoders are exported for ONNX Runtime only).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openvino as ov
from engine_choice import (
    MIN_COSINE,
    choose_precision,
    faster_engine,
    precision_candidates,
)
from export_onnx import export_parser
from model_folder import default_model_dir, read_json, read_model_spec, read_task
from openvino_ir import (
    compile_for,
    convert,
    engine_speeds,
    has_bfloat16,
    one_thread_session,
    publish_ir,
)
from publish import EMBED_LAYOUT, RERANK_LAYOUT, SPARSE_LAYOUT, write_atomically
from reference_check import (
    CHECK_TEXTS,
    LONG_TEXT,
    CheckCase,
    CheckSet,
    FloatArray,
    build_check_set,
    graph_cosines,
)
from rerank_openvino import export_reranker_ir
from served_tokenizer import IntArray, load_tokenizer, pad_batch
from st_model import load_checked_model
from tokenizers import Tokenizer

Batch = tuple[IntArray, IntArray]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = export_parser(
        __doc__.splitlines()[0],
        "the model_dir the ONNX export's export.json names",
        "onnx_cpu/ and openvino_cpu/",
    )
    return parser.parse_args(argv)


def run_ir(compiled: ov.CompiledModel, batch: Batch) -> FloatArray:
    input_ids, attention_mask = batch
    outputs = compiled({"input_ids": input_ids, "attention_mask": attention_mask})
    return outputs[compiled.output("embedding")]


def check_min_cosine(
    compiled: ov.CompiledModel, check: CheckSet, bar: float
) -> tuple[float, list[tuple[str, float]]]:
    """The lowest cosine to sentence-transformers over the check texts (reference_check's runs:
    batched, one at a time, left-padded where the tokenizer pads left), and the texts below
    `bar`."""
    cosines = graph_cosines(lambda ids, mask: run_ir(compiled, (ids, mask)), check)
    failing = [
        (case.label, float(cosine))
        for case, cosine in zip(check.cases, cosines, strict=True)
        if cosine < bar
    ]
    return float(cosines.min()), failing


def min_cosine(
    compiled: ov.CompiledModel, tokenizer: Tokenizer, reference: FloatArray, bar: float
) -> tuple[float, list[tuple[str, float]]]:
    """check_min_cosine over CHECK_TEXTS alone, with the reference given in their order."""
    check = CheckSet(
        cases=tuple(CheckCase(text[:40], None, text) for text in CHECK_TEXTS),
        encodings=tuple(tokenizer.encode_batch(list(CHECK_TEXTS))),
        reference=reference,
        pads_left=False,
    )
    return check_min_cosine(compiled, check, bar)


def timing_batches(tokenizer: Tokenizer) -> dict[str, Batch]:
    """Eight queries (about 14 tokens), eight short texts (about 45) and eight truncated at
    the max length."""
    sentences = [f"{sentence.rstrip('.')}." for sentence in LONG_TEXT.split(". ")]
    query = sentences[:8]
    short = [" ".join(sentences[start : start + 3]) for start in range(0, 24, 3)]
    long = [" ".join(sentences[start:]) for start in range(8)]
    return {
        "query-8": pad_batch(tokenizer.encode_batch(query)),
        "short-8": pad_batch(tokenizer.encode_batch(short)),
        "long-8": pad_batch(tokenizer.encode_batch(long)),
    }


def embedder_speeds(
    onnx_path: Path, compiled: ov.CompiledModel, batches: dict[str, Batch]
) -> dict[str, dict[str, float]]:
    """texts/s of each engine on each batch, one thread each."""
    session = one_thread_session(onnx_path)
    engines = {
        "onnxruntime": lambda batch: session.run(
            None, {"input_ids": batch[0], "attention_mask": batch[1]}
        ),
        "openvino": lambda batch: run_ir(compiled, batch),
    }
    return engine_speeds(engines, batches, lambda batch: batch[0].shape[0])


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    repository = args.repository.resolve()
    onnx_dir = repository / EMBED_LAYOUT.model
    if (repository / RERANK_LAYOUT.model / "export.json").exists() and not (
        onnx_dir / "export.json"
    ).exists():
        export_reranker_ir(repository, args.model_dir)
        return
    sparse_record = repository / SPARSE_LAYOUT.model / "export.json"
    if sparse_record.exists() and not (onnx_dir / "export.json").exists():
        raise SystemExit(
            f"{repository} holds a sparse encoder's export ({sparse_record}); sparse encoders "
            f"are exported for ONNX Runtime only, export_openvino.py converts a bi-encoder's "
            f"({onnx_dir})"
        )
    onnx_path = onnx_dir / "model.onnx"
    onnx_record: dict[str, Any] = read_json(onnx_dir / "export.json")
    # The ONNX graph's own weights folder: a repository exported from another model than the
    # packaged one checks against that model.
    recorded = onnx_record.get("model_dir")
    model_dir = (args.model_dir or (Path(recorded) if recorded else default_model_dir())).resolve()
    task = read_task(model_dir)
    if task == "rerank":
        raise SystemExit(
            f"{model_dir} holds a reranker (CrossEncoder), but {repository} holds no reranker "
            f"export ({repository / RERANK_LAYOUT.model}): export it with export_onnx.py first"
        )
    if task == "sparse":
        raise SystemExit(
            f"{model_dir} holds a sparse encoder (SparseEncoder); sparse encoders are exported "
            "for ONNX Runtime only, export_openvino.py converts bi-encoders"
        )
    spec = read_model_spec(model_dir)
    model = load_checked_model(spec)
    tokenizer = load_tokenizer(spec.transformer_dir, spec.max_seq_length)
    check = build_check_set(spec, model, tokenizer)

    core = ov.Core()
    capabilities = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    has_bf16 = has_bfloat16(core)
    with tempfile.TemporaryDirectory(prefix="export_openvino_") as workdir:
        model_xml = convert(onnx_path, Path(workdir))
        compiled: dict[str, ov.CompiledModel] = {}

        def measure(precision: str) -> float:
            compiled[precision] = compile_for(core, model_xml, precision)
            cosine, failing = check_min_cosine(compiled[precision], check, MIN_COSINE)
            print(
                f"check: {precision} min cosine {cosine:.7f} over "
                f"{len(check.cases)} texts (batched and one at a time)"
            )
            if failing:
                print(f"check: {precision} misses cosine {MIN_COSINE} on {failing}")
            return cosine

        choice = choose_precision(precision_candidates(has_bf16), measure)
        if choice.served is None:
            raise SystemExit(f"no precision kept cosine >= {MIN_COSINE}; nothing was written")
        precision, served = choice.served, compiled[choice.served]
        if not has_bf16:
            print("check: this processor has no bfloat16; float32 is served")
        speeds = embedder_speeds(onnx_path, served, timing_batches(tokenizer))
        faster = faster_engine(speeds)
        for name, rates in speeds.items():
            print(f"timing: {name} " + ", ".join(f"{b} {r:.1f} texts/s" for b, r in rates.items()))
        record = {
            **onnx_record,
            "openvino": {
                "precision": precision,
                "min_cosine_required": MIN_COSINE,
                "min_cosine": choice.measured,
                "processor_capabilities": list(capabilities),
                "version": ov.get_version(),
                "texts_per_s_one_thread": speeds,
                "faster_engine": faster,
            },
        }
        target = repository / "openvino_cpu" / "embedder" / "1"
        publish_ir(model_xml, target)
        write_atomically(
            target / "export.json",
            lambda temp: temp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8"),
        )
    refused = ", ".join(f"{p} {cosine:.7f}" for p, cosine in choice.refused().items())
    print(
        f"exported OpenVINO IR, precision {precision} (refused: {refused or 'none'}), "
        f"faster engine: {faster} -> {target}"
    )


if __name__ == "__main__":
    main()
