"""What two threads per stream cost against one: the OpenVINO layout the export falls back to
where the engine dies compiling one thread per stream (OpenVINO 2026.4.1, a decoder in bf16 on
AMX; docs/performance.md, "When the engine dies"), timed in-process on the packaged model's IR
in each precision this processor runs, per thread, on queries, short and long texts.

    .venv/bin/python -m perf.threads_per_stream --output perf/results/<machine>/threads_per_stream.md
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from model_common.openvino_runtime import ov
from model_common.openvino_setting import THREADS_PER_STREAM, Setting, precision_candidates
from model_common.processor import this_processor

from perf.ceiling import Batch, serving_tokenizer, tokenize
from perf.report_command import write_report
from perf.workloads import Kind, texts
from server.paths import OPENVINO_MODEL_DIR

KINDS: tuple[Kind, ...] = ("query", "short", "long")
ROWS = 8
SECONDS = 3.0
ROUNDS = 3


def rows_per_s(compiled: ov.CompiledModel, batch: Batch) -> float:
    request = compiled.create_infer_request()
    feeds = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
    request.infer(feeds)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < SECONDS:
        request.infer(feeds)
        done += ROWS
    return done / (time.perf_counter() - start)


def measure(model_xml: Path) -> dict[Setting, dict[Kind, float]]:
    """texts/s per thread of each setting on each batch, one stream each; the settings
    alternate round by round, the best round counts."""
    core = ov.Core()
    has_bf16 = "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    settings = [Setting(p, t) for p in precision_candidates(has_bf16) for t in THREADS_PER_STREAM]
    compiled = {
        s: core.compile_model(str(model_xml), "CPU", s.options(s.threads_per_stream))
        for s in settings
    }
    tokenizer = serving_tokenizer()
    batches = {kind: tokenize(tokenizer, [texts(kind, ROWS)])[0] for kind in KINDS}
    rates: dict[Setting, dict[Kind, float]] = {s: {} for s in settings}
    for _ in range(ROUNDS):
        for setting in settings:
            for kind, batch in batches.items():
                rate = rows_per_s(compiled[setting], batch) / setting.threads_per_stream
                rates[setting][kind] = max(rate, rates[setting].get(kind, 0.0))
    return rates


def render(rates: dict[Setting, dict[Kind, float]]) -> str:
    lines = [
        "# One thread per stream against two",
        "",
        f"`.venv/bin/python -m perf.threads_per_stream`; {this_processor().describe()}; "
        f"OpenVINO {ov.get_version()}.",
        "",
        f"The packaged model's IR, {ROWS} texts a batch, one stream of each setting's threads, "
        f"the best of {ROUNDS} rounds of {SECONDS:g} s; texts/s per thread, and against one "
        "thread per stream in the same precision.",
        "",
        "| setting | " + " | ".join(f"{kind}-{ROWS}" for kind in KINDS) + " |",
        "|---|" + "---|" * len(KINDS),
    ]
    for setting, by_kind in rates.items():
        one = rates[Setting(setting.precision)]
        cells = [f"{by_kind[kind]:.0f} ({by_kind[kind] / one[kind]:.2f})" for kind in KINDS]
        lines.append(f"| {setting.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    rates = measure(OPENVINO_MODEL_DIR / "model.xml")
    write_report(args.output, render(rates))


if __name__ == "__main__":
    main()
