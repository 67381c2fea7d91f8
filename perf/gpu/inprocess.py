"""The torch_gpu embedder's encoder on the GPU without Triton: the ceiling
the served numbers are held against, the GPU's own matrix-product rate, and
the cost of padding. CUDA only.

Forward passes are timed with CUDA events (median of repeats after warm-up)
on random token ids already on the GPU; `embed_in_groups` runs are timed as
the embedder runs them, from host tensors to host tensors.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from perf.gpu.models import VOCAB_SIZE, BertShape, dense_peak_flops
from server.paths import MODEL_REPOSITORY

ENCODER_FILE = MODEL_REPOSITORY / "torch_gpu" / "embedder" / "1" / "sentence_encoder.py"
WARMUP = 3
REPEATS = 10
PADDING_ROWS = 1024
PADDING_GROUP = 64


@cache
def sentence_encoder() -> ModuleType:
    """model_repository/torch_gpu/embedder/1/sentence_encoder.py, imported
    from its file (Triton puts that folder on the stub's path)."""
    spec = importlib.util.spec_from_file_location("sentence_encoder", ENCODER_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: its dataclasses look their module up.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _median_ms(run: Callable[[], object], on_gpu_clock: bool = True) -> float:
    """Median of REPEATS timed runs after WARMUP: by CUDA events, or by the
    host clock for runs that end by copying to the host (so they
    synchronize)."""
    for _ in range(WARMUP):
        run()
    times = []
    for _ in range(REPEATS):
        if on_gpu_clock:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            started = time.perf_counter()
            run()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def matmul_tflops(size: int = 8192) -> float:
    """The GPU's float16 matrix-product rate on random data, TFLOP/s."""
    left = torch.randn(size, size, device="cuda", dtype=torch.float16)
    right = torch.randn(size, size, device="cuda", dtype=torch.float16)
    milliseconds = _median_ms(lambda: left @ right)
    return 2 * size**3 / milliseconds / 1e9


def _random_ids(rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
    # Above the special tokens, as real text's ids are.
    return torch.randint(1000, VOCAB_SIZE, (rows, length), generator=generator)


def encoder_throughput(
    encoder: Any, shape: BertShape, rows: int, length: int, peak_flops: float
) -> dict[str, Any]:
    """One forward pass of `rows` full rows of `length` tokens, and the same
    rows through embed_in_groups from the host, as the embedder runs them."""
    module = sentence_encoder()
    generator = torch.Generator().manual_seed(rows * 1000 + length)
    host_ids = _random_ids(rows, length, generator)
    host_mask = torch.ones_like(host_ids)
    ids, mask = host_ids.cuda(), host_mask.cuda()
    with torch.inference_mode():
        forward_ms = _median_ms(lambda: encoder(ids, mask))
    groups_ms = _median_ms(
        lambda: module.embed_in_groups(encoder, host_ids, host_mask, rows), on_gpu_clock=False
    )
    tokens = rows * length
    flops = tokens * shape.flops_per_token(length)
    return {
        "shape": shape.name,
        "rows": rows,
        "length": length,
        "forward_ms": forward_ms,
        "forward_tokens_per_s": tokens / forward_ms * 1000,
        "forward_mfu": flops / (forward_ms / 1000) / peak_flops,
        "host_to_host_ms": groups_ms,
        "host_to_host_tokens_per_s": tokens / groups_ms * 1000,
        "host_to_host_mfu": flops / (groups_ms / 1000) / peak_flops,
    }


def padding_comparison(encoder: Any, shape: BertShape, max_length: int) -> list[dict[str, Any]]:
    """Rows of mixed real lengths (uniform in 8..max_length, seeded) embedded
    three ways, as useful (unpadded) tokens/s."""
    module = sentence_encoder()
    generator = torch.Generator().manual_seed(7)
    lengths = torch.randint(8, max_length + 1, (PADDING_ROWS,), generator=generator)
    ids = _random_ids(PADDING_ROWS, max_length, generator)
    mask = (torch.arange(max_length)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    useful = int(lengths.sum())

    def in_arrival_order(cut: bool) -> None:
        for start in range(0, PADDING_ROWS, PADDING_GROUP):
            width = int(lengths[start : start + PADDING_GROUP].max()) if cut else max_length
            rows = slice(start, start + PADDING_GROUP)
            encoder(ids[rows, :width].cuda(), mask[rows, :width].cuda())[0].cpu()

    ways: dict[str, Callable[[], object]] = {
        "length-sorted groups, each cut to its longest row (shipped)": lambda: (
            module.embed_in_groups(encoder, ids, mask, PADDING_GROUP)
        ),
        "arrival-order groups, each cut to its longest row": lambda: in_arrival_order(True),
        f"arrival-order groups padded to {max_length}": lambda: in_arrival_order(False),
    }
    results = []
    with torch.inference_mode():
        for name, run in ways.items():
            milliseconds = _median_ms(run, on_gpu_clock=False)
            results.append(
                {
                    "shape": shape.name,
                    "way": name,
                    "rows": PADDING_ROWS,
                    "group": PADDING_GROUP,
                    "useful_tokens": useful,
                    "ms": milliseconds,
                    "useful_tokens_per_s": useful / milliseconds * 1000,
                }
            )
    return results


def measure(
    shapes: dict[str, BertShape], model_dirs: dict[str, Path], max_length: int
) -> dict[str, Any]:
    device_name = torch.cuda.get_device_name()
    peak = dense_peak_flops(device_name)
    module = sentence_encoder()
    result: dict[str, Any] = {
        "device": device_name,
        "dense_fp16_peak_tflops": peak / 1e12,
        "matmul_tflops": matmul_tflops(),
        "throughput": [],
        "padding": [],
    }
    for name, shape in shapes.items():
        encoder = module.load_encoder(model_dirs[name], "mean", torch.device("cuda"), torch.float16)
        for length in (50, max_length):
            for rows in (64, 128, 256):
                result["throughput"].append(encoder_throughput(encoder, shape, rows, length, peak))
        result["padding"] += padding_comparison(encoder, shape, max_length)
        del encoder
        torch.cuda.empty_cache()
    return result
