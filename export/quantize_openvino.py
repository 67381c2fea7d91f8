"""Quantize the OpenVINO embedder to int8 with NNCF's post-training quantization (opt-in).

Reads the float IR that export/export_openvino.py wrote (<source>/openvino_cpu/embedder/1/
model.xml and its export.json), calibrates NNCF's post-training quantization on texts from a
file (one text per line; perf/cpu_engines.py writes real prose from perf/workloads.py), checks
the result in the setting the float IR serves in (in a process of its own, as every export
check runs) against sentence-transformers on the export's check texts (min cosine >= 0.99: int8
embeddings are an opt-in trade), and writes a complete
embedder folder, config included, into <target>/openvino_cpu/embedder/. Serve it in place of the
default with `--model-repository model_repository/shared --model-repository
<target>/openvino_cpu`; the default embedder is never replaced.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nncf
from embed_folder import read_embed_spec
from embed_openvino import embedding_run, min_cosine
from embedding_catalog.tasks import EMBED, VERSION
from isolated_graph import EngineFailed
from model_common.openvino_runtime import ov
from model_common.openvino_setting import Setting, exported_setting
from model_folder import default_model_dir, read_json
from openvino_ir import Feeds, open_setting
from publish import write_record
from reference_check import CHECK_TEXTS, l2_normalize
from served_tokenizer import load_tokenizer, pad_batch
from st_model import load_model
from tokenizers import Tokenizer

MIN_COSINE = 0.99
CALIBRATION_BATCH = 8


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration-texts", type=Path, required=True, help="one text per line")
    parser.add_argument(
        "--source",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "model_repository",
        help="repository root holding openvino_cpu/ (default: %(default)s)",
    )
    parser.add_argument("--target", type=Path, required=True, help="repository root to write")
    parser.add_argument("--model-dir", type=Path, default=None)
    return parser.parse_args(argv)


def calibration_batches(path: Path, tokenizer: Tokenizer) -> list[Feeds]:
    """The file's texts, tokenized as served, in batches of CALIBRATION_BATCH."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        raise SystemExit(f"{path} holds no texts")
    return [
        dict(
            zip(
                ("input_ids", "attention_mask"),
                pad_batch(tokenizer.encode_batch(lines[start : start + CALIBRATION_BATCH])),
                strict=True,
            )
        )
        for start in range(0, len(lines), CALIBRATION_BATCH)
    ]


def checked_cosine(
    model_xml: Path, setting: Setting, tokenizer: Tokenizer, model_dir: Path
) -> tuple[float, list[tuple[str, float]]]:
    """The quantized IR's min cosine to sentence-transformers on CHECK_TEXTS, and the texts
    below MIN_COSINE."""
    model = load_model(model_dir, EMBED.model_type)
    reference = l2_normalize(model.encode(list(CHECK_TEXTS), convert_to_numpy=True))
    try:
        with open_setting(model_xml, setting) as graph:
            return min_cosine(embedding_run(graph), tokenizer, reference, MIN_COSINE)
    except EngineFailed as failure:
        raise SystemExit(f"int8 ({setting.label} elsewhere): {failure}") from None


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    source = args.source.resolve() / EMBED.engine_stage("openvino")
    record: dict[str, Any] = read_json(source / VERSION / "export.json")
    setting = exported_setting(record["openvino"])
    model_dir = (args.model_dir or default_model_dir()).resolve()
    tokenizer = load_tokenizer(model_dir, read_embed_spec(model_dir).max_seq_length)
    batches = calibration_batches(args.calibration_texts, tokenizer)
    quantized = nncf.quantize(
        ov.Core().read_model(str(source / VERSION / "model.xml")),
        nncf.Dataset(batches),
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=len(batches),
    )
    target = args.target.resolve() / EMBED.engine_stage("openvino")
    (target / VERSION).mkdir(parents=True, exist_ok=True)
    model_xml = target / VERSION / "model.xml"
    ov.save_model(quantized, str(model_xml), compress_to_fp16=False)
    lowest, failing = checked_cosine(model_xml, setting, tokenizer, model_dir)
    print(
        f"check: int8 ({setting.label} elsewhere) min cosine {lowest:.6f} over "
        f"{len(CHECK_TEXTS)} texts"
    )
    if failing:
        # The IR stays for measurement (perf/cpu_engines.py), but without its config and
        # record the folder is no model Triton loads.
        raise SystemExit(
            f"int8 misses cosine {MIN_COSINE} on {failing}; {target} holds the IR, not a model"
        )
    quantization = {
        "method": "nncf post-training, transformer preset",
        "nncf": nncf.__version__,
        "calibration_texts": sum(int(batch["input_ids"].shape[0]) for batch in batches),
        "min_cosine_required": MIN_COSINE,
        "min_cosine": lowest,
    }
    quantized_record = {**record, "openvino": {**record["openvino"], "quantization": quantization}}
    write_record(target / VERSION / "export.json", quantized_record)
    shutil.copyfile(source / "config.pbtxt", target / "config.pbtxt")
    print(f"wrote the int8 embedder -> {target}")


if __name__ == "__main__":
    main()
