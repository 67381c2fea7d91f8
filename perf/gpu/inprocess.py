"""The torch_gpu embedder's packed encoder on the GPU without Triton: the
ceiling the served numbers are held against, the GPU's own matrix-product
rate, and the cost of padding against the padded encoder it replaced
(perf/gpu/padded_encoder.py). CUDA only.

Forward passes are timed with CUDA events (median of repeats after warm-up)
on random token ids already on the GPU, packed; `embed_packed` runs are
timed as the embedder runs them, from host arrays to host arrays, with the
host thread's CPU time per forward beside them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from perf.gpu import padded_encoder
from perf.gpu.embedder_code import ENCODER_DIR, packed_modules
from perf.gpu.models import VOCAB_SIZE, BertShape, dense_peak_flops

WARMUP = 3
REPEATS = 10
PADDING_ROWS = 1024
PADDING_GROUP = 64


def tokens_per_forward() -> int:
    """The shipped config's token budget per forward."""
    config = (ENCODER_DIR.parent / "config.pbtxt").read_text()
    key = config.index('key: "tokens_per_forward"')
    return int(config[key:].split('string_value: "', 1)[1].split('"', 1)[0])


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


def _host_ms(run: Callable[[], object]) -> tuple[float, float]:
    """Median wall ms and median CPU ms of this thread, over REPEATS runs
    that end on the host, after WARMUP."""
    for _ in range(WARMUP):
        run()
    wall, cpu = [], []
    for _ in range(REPEATS):
        started, started_cpu = time.perf_counter(), time.thread_time()
        run()
        cpu.append((time.thread_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def matmul_tflops(size: int = 8192) -> float:
    """The GPU's float16 matrix-product rate on random data, TFLOP/s."""
    left = torch.randn(size, size, device="cuda", dtype=torch.float16)
    right = torch.randn(size, size, device="cuda", dtype=torch.float16)
    milliseconds = _median_ms(lambda: left @ right)
    return 2 * size**3 / milliseconds / 1e9


def _random_ids(rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
    # Above the special tokens, as real text's ids are.
    return torch.randint(1000, VOCAB_SIZE, (rows, length), generator=generator)


def _packed_on_gpu(rows: int, length: int, generator: torch.Generator) -> Any:
    """`rows` full rows of `length` random tokens, packed, on the GPU."""
    encoder_module, _ = packed_modules()
    ids = _random_ids(rows, length, generator).flatten()
    positions = torch.arange(length).repeat(rows)
    bounds = tuple(range(0, rows * length + 1, length))
    return encoder_module.PackedRows(
        torch.stack([ids, positions]).cuda(),
        torch.tensor(bounds, dtype=torch.int32).cuda(),
        bounds,
        length,
    )


def encoder_throughput(
    encoder: Any, shape: BertShape, rows: int, length: int, peak_flops: float
) -> dict[str, Any]:
    """One packed forward of `rows` full rows of `length` tokens, and the
    same rows through embed_packed from the host, as the embedder runs them
    (in forwards of the shipped token budget)."""
    _, rows_module = packed_modules()
    generator = torch.Generator().manual_seed(rows * 1000 + length)
    packed = _packed_on_gpu(rows, length, generator)
    host_ids = _random_ids(rows, length, generator).numpy()
    host_mask = np.ones_like(host_ids)
    budget = tokens_per_forward()
    forwards = len(rows_module.forward_spans([length] * rows, budget))
    with torch.inference_mode():
        forward_ms = _median_ms(lambda: encoder(packed))
    host_to_host_ms, cpu_ms = _host_ms(
        lambda: rows_module.embed_packed(encoder, host_ids, host_mask, budget)
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
        "host_to_host_ms": host_to_host_ms,
        "host_to_host_tokens_per_s": tokens / host_to_host_ms * 1000,
        "host_to_host_mfu": flops / (host_to_host_ms / 1000) / peak_flops,
        "tokens_per_forward": tokens / forwards,
        "cpu_ms_per_forward": cpu_ms / forwards,
        "attention": encoder.attention_name,
    }


def padding_comparison(
    encoder: Any, padded: Any, shape: BertShape, max_length: int
) -> list[dict[str, Any]]:
    """Rows of mixed real lengths (uniform in 8..max_length, seeded) embedded
    packed (shipped) and three padded ways (the padded encoder), as useful
    (unpadded) tokens/s."""
    _, rows_module = packed_modules()
    generator = torch.Generator().manual_seed(7)
    lengths = torch.randint(8, max_length + 1, (PADDING_ROWS,), generator=generator)
    ids = _random_ids(PADDING_ROWS, max_length, generator)
    mask = (torch.arange(max_length)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    useful = int(lengths.sum())
    budget = tokens_per_forward()

    def in_arrival_order(cut: bool) -> None:
        for start in range(0, PADDING_ROWS, PADDING_GROUP):
            width = int(lengths[start : start + PADDING_GROUP].max()) if cut else max_length
            rows = slice(start, start + PADDING_GROUP)
            padded(ids[rows, :width].cuda(), mask[rows, :width].cuda())[0].cpu()

    ways: dict[str, Callable[[], object]] = {
        f"packed, forwards of up to {budget} tokens (shipped)": lambda: rows_module.embed_packed(
            encoder, ids.numpy(), mask.numpy(), budget
        ),
        "length-sorted padded groups, each cut to its longest row": lambda: (
            padded_encoder.embed_in_groups(padded, ids, mask, PADDING_GROUP)
        ),
        "arrival-order padded groups, each cut to its longest row": lambda: in_arrival_order(True),
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
    encoder_module, _ = packed_modules()
    result: dict[str, Any] = {
        "device": device_name,
        "dense_fp16_peak_tflops": peak / 1e12,
        "matmul_tflops": matmul_tflops(),
        "throughput": [],
        "padding": [],
    }
    cuda = torch.device("cuda")
    for name, shape in shapes.items():
        encoder = encoder_module.load_encoder(model_dirs[name], "mean", cuda, torch.float16)
        for length in (50, max_length):
            for rows in (64, 128, 256):
                result["throughput"].append(encoder_throughput(encoder, shape, rows, length, peak))
        padded = padded_encoder.load_encoder(model_dirs[name], "mean", cuda, torch.float16)
        result["padding"] += padding_comparison(encoder, padded, shape, max_length)
        del encoder, padded
        torch.cuda.empty_cache()
    return result
