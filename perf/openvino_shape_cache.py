"""What OpenVINO's per-shape kernel cache costs a stage: the packaged model's IR, compiled as a
stage compiles it, run on distinct (batch, length) input shapes, each cache capacity in a
process of its own so that its RSS is the graph's: the RSS after each hundred shapes, and the
median time of a call on a shape met for the first time and on one met again.

    .venv/bin/python -m perf.openvino_shape_cache --output perf/results/<machine>/openvino_shape_cache.md
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from model_common.openvino_runtime import ov
from model_common.openvino_setting import (
    SHAPES_KEPT,
    SHAPES_KEPT_OPTION,
    Setting,
    precision_candidates,
)
from model_common.processor import this_processor

from perf.report_command import write_report
from server.paths import OPENVINO_MODEL_DIR

# `--one`'s capacity for the stages' own options.
SERVED = "served"
OPENVINO_DEFAULT = 5000
SHAPES = 400
# The shapes met again at the end: the first ones after the largest.
AGAIN = 50
# One stream of one thread: the RSS and the times are one stream's.
THREADS = 1
MAX_ROWS, MIN_LENGTH, MAX_LENGTH = 8, 8, 64


@dataclass(frozen=True)
class ShapeCost:
    rss_mib: list[int]
    new_ms: float
    again_ms: float


def shapes(count: int) -> list[tuple[int, int]]:
    """The largest shape first, so that the buffers are at their size, then
    the other (batch, length) pairs within it, each once, in a fixed order."""
    others = [
        (rows, length)
        for rows in range(1, MAX_ROWS + 1)
        for length in range(MIN_LENGTH, MAX_LENGTH)
    ]
    random.Random(0).shuffle(others)
    return [(MAX_ROWS, MAX_LENGTH), *others][:count]


def rss_mib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def measure(model_xml: Path, precision: str, capacity: int | None, count: int) -> ShapeCost:
    """In this process: `capacity` None compiles with the stages' own options."""
    options = Setting(precision).options(THREADS)
    if capacity is not None:
        options[SHAPES_KEPT_OPTION] = capacity
    compiled = ov.Core().compile_model(str(model_xml), "CPU", options)
    request = compiled.create_infer_request()
    names = [tensor.get_any_name() for tensor in compiled.inputs]

    def call_ms(shape: tuple[int, int]) -> float:
        started = time.perf_counter()
        request.infer({name: np.ones(shape, np.int64) for name in names})
        return (time.perf_counter() - started) * 1e3

    met = shapes(count)
    levels, new_ms = [], []
    for index, shape in enumerate(met, start=1):
        new_ms.append(call_ms(shape))
        if index % 100 == 0:
            levels.append(rss_mib())
    again_ms = [call_ms(shape) for shape in met[1 : AGAIN + 1]]
    return ShapeCost(levels, statistics.median(new_ms), statistics.median(again_ms))


def measure_apart(model_xml: Path, precision: str, capacity: int | None, count: int) -> ShapeCost:
    """`measure` in a process of its own."""
    command = [sys.executable, "-m", "perf.openvino_shape_cache", "--one", str(model_xml)]
    command += [precision, SERVED if capacity is None else str(capacity), str(count)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    return ShapeCost(**json.loads(done.stdout.splitlines()[-1]))


def render(costs: dict[tuple[str, str], ShapeCost]) -> str:
    hundreds = " | ".join(f"RSS after {100 * n} (MiB)" for n in range(1, SHAPES // 100 + 1))
    lines = [
        "# OpenVINO's per-shape cache",
        "",
        f"`.venv/bin/python -m perf.openvino_shape_cache`; {this_processor().describe()}; "
        f"OpenVINO {ov.get_version()}.",
        "",
        f"The packaged model's IR, one stream of {THREADS} thread, run on {SHAPES} distinct "
        f"(rows, length) shapes up to ({MAX_ROWS}, {MAX_LENGTH}), each once, then the first "
        f"{AGAIN} after the largest again; each capacity in a process of its own. A stage "
        f"keeps {SHAPES_KEPT} (`SHAPES_KEPT`, model_common/openvino_setting.py).",
        "",
        f"| precision | shapes kept | {hundreds} | ms a new shape | ms a shape met again |",
        "|---|---|" + "---|" * (SHAPES // 100) + "---|---|",
    ]
    for (precision, label), cost in costs.items():
        levels = " | ".join(str(level) for level in cost.rss_mib)
        lines.append(
            f"| {precision} | {label} | {levels} | {cost.new_ms:.1f} | {cost.again_ms:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path)
    parser.add_argument("--one", nargs=4, metavar=("MODEL_XML", "PRECISION", "CAPACITY", "SHAPES"))
    args = parser.parse_args()
    if args.one:
        model_xml, precision, capacity, count = args.one
        kept = None if capacity == SERVED else int(capacity)
        cost = measure(Path(model_xml), precision, kept, int(count))
        print(json.dumps(asdict(cost)))
        return
    if args.output is None:
        parser.error("--output is required")
    has_bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    labels = {
        None: f"as served ({SHAPES_KEPT})",
        OPENVINO_DEFAULT: f"OpenVINO's default ({OPENVINO_DEFAULT})",
        0: "none (0)",
    }
    model_xml = OPENVINO_MODEL_DIR / "model.xml"
    costs = {
        (precision, label): measure_apart(model_xml, precision, capacity, SHAPES)
        for precision in precision_candidates(has_bf16)
        for capacity, label in labels.items()
    }
    write_report(args.output, render(costs))


if __name__ == "__main__":
    main()
