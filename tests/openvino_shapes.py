"""Runs the OpenVINO embedder's graph, compiled as its stage compiles it,
on distinct input shapes and prints the process's RSS (MiB) after each
hundred, as JSON: tests/test_openvino_embedder.py checks that new shapes do
not keep growing it. Run in a process of its own so its RSS is the graph's.

    python tests/openvino_shapes.py MODEL_XML SHAPES
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import openvino as ov
from model_common.openvino_compile import compile_cached
from model_common.openvino_setting import Setting


def rss_mib() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def main() -> None:
    model_xml, count = Path(sys.argv[1]), int(sys.argv[2])
    compiled = compile_cached(ov.Core(), model_xml, Setting("f32"), 1, print)
    request = compiled.create_infer_request()
    names = [tensor.get_any_name() for tensor in compiled.inputs]
    # The largest shape first, so that the buffers are at their size, then
    # other (batch, length) pairs within it, each once, in a fixed order.
    others = [(batch, length) for batch in range(1, 9) for length in range(8, 64)]
    random.Random(0).shuffle(others)
    shapes = [(8, 64), *others][:count]
    levels = []
    for index, shape in enumerate(shapes, start=1):
        request.infer({name: np.ones(shape, np.int64) for name in names})
        if index % 100 == 0:
            levels.append(rss_mib())
    print(json.dumps(levels))


if __name__ == "__main__":
    main()
