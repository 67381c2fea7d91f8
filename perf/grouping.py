"""How the ONNX Runtime embedder should cut an execute call's rows: groups of
at most N rows (what it ships) or of at most N padded tokens (what the
OpenVINO embedder ships), measured in-process.

Each execute call holds 64 rows, as Triton's dynamic batching hands the
embedder several requests at once: queries, short texts, long texts, and all
three mixed (ragged batching merges requests of different lengths). Two
threads, each with its own single-threaded session, as the shipped two
instances run; the cuts alternate round by round so that a slow stretch of
the shared cores does not land on one of them.

    .venv/bin/python -m perf.grouping --output perf/results/<machine>/grouping.md
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from model_common.processor import this_processor
from model_common.rows import groups_by_tokens, real_lengths

from perf.ceiling import Batch, serving_tokenizer, tokenize
from perf.cpu_engines import Engine, FloatArray, Runner, in_process_rate, onnxruntime_engine
from perf.report_command import write_report
from perf.workloads import Kind, texts
from server.paths import ONNX_MODEL_DIR

ROWS_PER_CALL = 64
CALLS = 8
WORKERS = 2
KINDS: tuple[Kind, ...] = ("query", "short", "long")


def groups_by_rows(lengths: np.ndarray, rows_per_run: int) -> list[np.ndarray]:
    """Row indices sorted by length, cut into the fewest groups of equal
    size with at most rows_per_run rows each: the cut the ONNX Runtime
    embedder shipped before this measurement."""
    order = np.argsort(lengths, kind="stable")
    return np.array_split(order, -(-len(order) // rows_per_run))


@dataclass(frozen=True)
class Cut:
    name: str
    groups: Callable[[np.ndarray], list[np.ndarray]]


CUTS = (
    *(
        Cut(f"{rows} rows", lambda lengths, n=rows: groups_by_rows(lengths, n))
        for rows in (4, 16, 64)
    ),
    *(
        Cut(f"{tokens} tokens", lambda lengths, n=tokens: groups_by_tokens(lengths, n, 1))
        for tokens in (512, 1024, 2048)
    ),
)


def _calls() -> dict[str, list[Batch]]:
    """CALLS execute calls of ROWS_PER_CALL rows per workload, each row padded to
    its call's longest, as the embedder receives them."""
    tokenizer = serving_tokenizer()
    count = ROWS_PER_CALL * CALLS
    pools = {kind: texts(kind, count) for kind in KINDS}
    mixed = [text for kind in KINDS for text in pools[kind][: count // len(KINDS) + 1]]
    random.Random(0).shuffle(mixed)
    pools_by_name = {**pools, "mixed": mixed[:count]}
    return {
        name: tokenize(
            tokenizer, [pool[i : i + ROWS_PER_CALL] for i in range(0, count, ROWS_PER_CALL)]
        )
        for name, pool in pools_by_name.items()
    }


def _grouped(engine: Engine, cut: Cut) -> Engine:
    """`engine` running each call as the embedder does: rows cut into groups,
    each trimmed to its own longest row, one group after another."""

    def runner() -> Runner:
        run = engine.runner()

        def run_call(batch: Batch) -> FloatArray:
            lengths = real_lengths(batch.attention_mask)
            parts = []
            for group in cut.groups(lengths):
                width = int(lengths[group].max())
                parts.append(
                    run(Batch(batch.input_ids[group, :width], batch.attention_mask[group, :width]))
                )
            return np.concatenate(parts)

        return run_call

    return Engine(f"{engine.name}, {cut.name}", runner)


def measure(rounds: int) -> dict[str, dict[str, list[float]]]:
    """texts/s per workload and cut, one value per round."""
    engine = onnxruntime_engine("ONNX Runtime fp32", ONNX_MODEL_DIR / "model.onnx")
    calls = _calls()
    rates: dict[str, dict[str, list[float]]] = {name: {} for name in calls}
    for round_index in range(rounds):
        cuts: Sequence[Cut] = CUTS if round_index % 2 == 0 else CUTS[::-1]
        for name, batches in calls.items():
            for cut in cuts:
                rate = in_process_rate(_grouped(engine, cut), batches, WORKERS)
                rates[name].setdefault(cut.name, []).append(rate)
                print(f"round {round_index + 1} {name} {cut.name}: {rate:.1f} texts/s", flush=True)
    return rates


def render(rates: dict[str, dict[str, list[float]]], rounds: int) -> str:
    cut_names = [cut.name for cut in CUTS]
    lines = [
        "# ONNX Runtime: an execute call's rows cut by rows or by tokens",
        "",
        f"`.venv/bin/python -m perf.grouping`; {this_processor().describe()}.",
        f"In-process texts/s, {WORKERS} threads each with a one-thread session, calls of "
        f"{ROWS_PER_CALL} rows; mean of {rounds} rounds (each round's value in brackets).",
        "",
        "| workload | " + " | ".join(cut_names) + " |",
        "|---|" + "---|" * len(cut_names),
    ]
    for name, by_cut in rates.items():
        cells = [
            f"{np.mean(by_cut[c]):.1f} ({'/'.join(f'{v:.0f}' for v in by_cut[c])})"
            for c in cut_names
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    write_report(args.output, render(measure(args.rounds), args.rounds))


if __name__ == "__main__":
    main()
