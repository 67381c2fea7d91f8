"""Convert the exported ONNX graph to OpenVINO IR for the OpenVINO CPU embedder.

Reads what export/export_onnx.py wrote (<repository>/onnx_cpu/embedder/1/model.onnx and its
export.json), converts the graph to IR (float32 weights), and checks it in the precision it
will be served in against sentence-transformers on the original weights: min cosine >= 0.9999
over reference_check.py's check texts (multilingual text, emoji, an empty and a whitespace-only
text, a text truncated at the max length, and some after each of the model's prompts), batched
and one text at a time (and batched with left padding where the model's tokenizer pads on the
left). The weights folder is the one the ONNX record names unless --model-dir says otherwise.
bfloat16 is checked first where the processor runs it; if it misses the bar, the export says
so and records float32, which the server then serves. Each setting compiles and runs in a
process of its own (openvino_ir.py): where the engine dies or fails there, that setting is
refused, naming how ("bf16 refused: the engine died of SIGFPE compiling it"), and the next is
tried: the same precision with two threads per stream, then the next precision. Then it times
ONNX Runtime float32 against OpenVINO in the setting served on the same batches, per thread,
and records which to serve (faster_engine): the launcher serves that CPU embedder by default.
The record names the processor class it was checked on. On success it writes, each file
atomically:

    <repository>/openvino_cpu/embedder/1/model.xml, model.bin
    <repository>/openvino_cpu/embedder/1/export.json   (the ONNX record, plus "openvino")

Bi-encoders only: a repository holding a reranker's export (reranker/scorer/) or a sparse
encoder's (sparse/encoder/), or a reranker's or a sparse encoder's weights folder, is refused with
a message saying so (sparse encoders are exported for ONNX Runtime only).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine_choice import MIN_COSINE, keeps_cosine_bar
from export_onnx import export_parser
from isolated_graph import IsolatedGraph
from model_common.openvino_setting import Setting
from model_folder import default_model_dir, read_json, read_model_spec, read_task
from openvino_ir import Feeds, IrCheck, export_ir, ir_record
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

# A graph's run on (input_ids, attention_mask): the embeddings.
RunEmbedding = Callable[[IntArray, IntArray], FloatArray]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = export_parser(
        __doc__.splitlines()[0],
        "the model_dir the ONNX export's export.json names",
        "onnx_cpu/ and openvino_cpu/",
    )
    return parser.parse_args(argv)


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
        name: dict(
            zip(
                ("input_ids", "attention_mask"),
                pad_batch(tokenizer.encode_batch(texts)),
                strict=True,
            )
        )
        for name, texts in batches.items()
    }


def embedder_check(check: CheckSet, tokenizer: Tokenizer) -> IrCheck:
    """The bi-encoder's: min cosine to sentence-transformers, the same bar in every precision."""

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

    return IrCheck(measure, keeps_cosine_bar, report, timing_batches(tokenizer), "texts")


def refuse_other_tasks(repository: Path, model_dir: Path | None) -> bool:
    """Exports a reranker's IR where the repository holds a reranker's export (True), refuses
    a sparse encoder's, and goes on (False) for a bi-encoder's."""
    onnx_record = repository / EMBED_LAYOUT.model / "export.json"
    if (repository / RERANK_LAYOUT.model / "export.json").exists() and not onnx_record.exists():
        export_reranker_ir(repository, model_dir)
        return True
    sparse_record = repository / SPARSE_LAYOUT.model / "export.json"
    if sparse_record.exists() and not onnx_record.exists():
        raise SystemExit(
            f"{repository} holds a sparse encoder's export ({sparse_record}); sparse encoders "
            f"are exported for ONNX Runtime only, export_openvino.py converts a bi-encoder's "
            f"({onnx_record.parent})"
        )
    return False


def checked_model_dir(repository: Path, onnx_record: dict[str, Any], given: Path | None) -> Path:
    """The ONNX graph's own weights folder (a repository exported from another model than the
    packaged one checks against that model), refused unless it holds a bi-encoder."""
    recorded = onnx_record.get("model_dir")
    model_dir = (given or (Path(recorded) if recorded else default_model_dir())).resolve()
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
    return model_dir


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    repository = args.repository.resolve()
    if refuse_other_tasks(repository, args.model_dir):
        return
    onnx_dir = repository / EMBED_LAYOUT.model
    onnx_record: dict[str, Any] = read_json(onnx_dir / "export.json")
    spec = read_model_spec(checked_model_dir(repository, onnx_record, args.model_dir))
    model = load_checked_model(spec)
    tokenizer = load_tokenizer(spec.transformer_dir, spec.max_seq_length)
    check = build_check_set(spec, model, tokenizer)
    target = repository / "openvino_cpu" / "embedder" / "1"
    export = export_ir(onnx_dir / "model.onnx", target, embedder_check(check, tokenizer))
    record = {
        **onnx_record,
        "openvino": {
            **ir_record(export, "texts"),
            "min_cosine_required": MIN_COSINE,
            "min_cosine": export.choice.measured,
        },
    }
    write_atomically(
        target / "export.json",
        lambda temp: temp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8"),
    )
    print(
        f"exported OpenVINO IR, setting {export.served.label} ({export.choice.summary()}), "
        f"faster engine: {export.faster} -> {target}"
    )


if __name__ == "__main__":
    main()
