"""The torch_gpu embedder's packed encoder without Triton, in the variants
the GPU issue asks to compare one by one, each beside the shipped one in
the same run: compiled with CUDA graphs of the shipped token buckets (as
shipped), eager, compiled without graphs, compiled with tanh GELU, and compiled by max-autotune (GEMM
templates that take bias and GELU into their epilogue). Plus the GPU's own
matrix-product rate and the cost of padding against the padded encoder
the packed one replaced (perf/gpu/padded_encoder.py).

For each variant and workload: one forward of packed host rows (copy
included) on the GPU clock, the whole execution from host arrays to host
arrays as the embedder runs it with the host thread's CPU ms per forward,
tokens per forward, and a profile of the forward (perf/gpu/profile.py);
per variant its warm-up (compile) and capture time, graph memory, and
cosine to sentence-transformers in float32 on the same weights.

On CPU (`--device cpu`, how the tests run the kit) the same code runs at
a small scale: compile modes and graph capture are switched off by device,
the clock is the host's, and there is no MFU.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from embedding_client.batching import pad_rows
from tokenizers import Tokenizer

from harness.repository import read_config
from perf.gpu import padded_encoder
from perf.gpu.embedder_code import ENCODER_DIR, packed_graphs, packed_modules
from perf.gpu.models import VOCAB_SIZE, BertShape, dense_peak_flops, reference_embeddings
from perf.gpu.profile import kernel_table
from perf.gpu.served import CHECK_TEXTS
from perf.gpu.variants import SERVED, VARIANTS
from server.paths import TOKENIZER_JSON

PADDING_ROWS = 1024
PADDING_GROUP = 64
# Tokens per row of each workload: short texts, and texts at the max length.
WORKLOAD_LENGTHS = (50, 512)


@dataclass(frozen=True)
class Scale:
    """Rows per workload (an execution of the shipped max_batch_size on a
    GPU), timed runs, and the token budgets per forward compared; a CPU run
    only checks that the kit works."""

    rows: int
    warmup: int
    repeats: int
    budgets: tuple[int, ...]

    @classmethod
    def for_device(cls, device: torch.device) -> Scale:
        if device.type == "cuda":
            # The 16-64K tokens, and half of that.
            return cls(256, 3, 10, (8192, 16384, 32768, 65536))
        return cls(2, 1, 2, (512, 1024))


@cache
def _shipped_config() -> Any:
    return read_config(ENCODER_DIR.parent / "config.pbtxt")


def tokens_per_forward() -> int:
    """The shipped config's token budget per forward."""
    return int(_shipped_config().parameters["tokens_per_forward"].string_value)


def graph_token_buckets() -> tuple[int, ...]:
    """The shipped config's CUDA-graph token buckets."""
    graphs = packed_graphs()
    value = _shipped_config().parameters[graphs.GRAPH_TOKENS_PARAMETER].string_value
    return graphs.parse_buckets(value, tokens_per_forward())


def max_batch_size() -> int:
    """The shipped config's rows per execution: a graph bucket's row bound."""
    return int(_shipped_config().max_batch_size)


def _median_ms(run: Callable[[], object], device: torch.device, scale: Scale) -> float:
    """Median ms of scale.repeats runs after scale.warmup: by CUDA events on
    a GPU, by the host clock on CPU."""
    for _ in range(scale.warmup):
        run()
    times = []
    for _ in range(scale.repeats):
        if device.type == "cuda":
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


def _host_ms(run: Callable[[], object], scale: Scale) -> tuple[float, float]:
    """Median wall ms and median CPU ms of this thread, over runs that end
    on the host."""
    for _ in range(scale.warmup):
        run()
    wall, cpu = [], []
    for _ in range(scale.repeats):
        started, started_cpu = time.perf_counter(), time.thread_time()
        run()
        cpu.append((time.thread_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def matmul_tflops(size: int = 8192) -> float:
    """The GPU's float16 matrix-product rate on random data, TFLOP/s."""
    left = torch.randn(size, size, device="cuda", dtype=torch.float16)
    right = torch.randn(size, size, device="cuda", dtype=torch.float16)
    milliseconds = _median_ms(lambda: left @ right, torch.device("cuda"), Scale(0, 3, 10, ()))
    return 2 * size**3 / milliseconds / 1e9


def _random_ids(rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
    # Above the special tokens, as real text's ids are.
    return torch.randint(1000, VOCAB_SIZE, (rows, length), generator=generator)


def _rate(tokens: float, milliseconds: float) -> float:
    return tokens / milliseconds * 1000


def workload(
    encoder: Any,
    forward: Callable[[Any], torch.Tensor] | None,
    shape: BertShape,
    rows: int,
    length: int,
    peak_flops: float | None,
    scale: Scale,
) -> dict[str, Any]:
    """`rows` full rows of `length` random tokens: the first forward's packed
    rows timed alone and profiled, and all rows through embed_packed, in
    forwards of the shipped token budget."""
    _, rows_module = packed_modules()
    device = encoder.device
    ids = _random_ids(rows, length, torch.Generator().manual_seed(rows * 1000 + length))
    attended = torch.ones_like(ids, dtype=torch.bool)
    budget = tokens_per_forward()
    spans = rows_module.forward_spans([length] * rows, budget)
    first = slice(*spans[0])
    packed = rows_module.pack(ids[first], encoder.position_ids(ids[first]), attended[first])
    run = forward or (lambda host: encoder(host.to(device)))

    def one_forward() -> object:
        with torch.inference_mode():
            return run(packed)

    forward_ms = _median_ms(one_forward, device, scale)
    host_ids, host_mask = ids.numpy(), np.ones_like(ids.numpy())
    host_to_host_ms, cpu_ms = _host_ms(
        lambda: rows_module.embed_packed(encoder, host_ids, host_mask, budget, forward), scale
    )
    forward_tokens, tokens = packed.tokens.shape[1], rows * length
    flops_per_token = shape.flops_per_token(length)

    def mfu(tokens_per_s: float) -> float | None:
        return tokens_per_s * flops_per_token / peak_flops if peak_flops else None

    forward_rate, host_rate = _rate(forward_tokens, forward_ms), _rate(tokens, host_to_host_ms)
    return {
        "rows": rows,
        "length": length,
        "forward_tokens": forward_tokens,
        "forward_ms": forward_ms,
        "forward_tokens_per_s": forward_rate,
        "forward_mfu": mfu(forward_rate),
        "host_to_host_ms": host_to_host_ms,
        "host_to_host_tokens_per_s": host_rate,
        "host_to_host_mfu": mfu(host_rate),
        "tokens_per_forward": tokens / len(spans),
        "cpu_ms_per_forward": cpu_ms / len(spans),
        "profile": kernel_table(one_forward, device),
    }


@cache
def check_texts(max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """The served check's texts as the tokenizer stage sends them."""
    tokenizer = Tokenizer.from_file(str(TOKENIZER_JSON))
    tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()
    return pad_rows([encoding.ids for encoding in tokenizer.encode_batch(list(CHECK_TEXTS))])


class InProcess:
    """The in-process measurements of one run, filled step by step (each
    variant is a step of the run, so a run cut short keeps the variants it
    measured)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.dtype = torch.float16 if device.type == "cuda" else torch.float32
        self.scale = Scale.for_device(device)
        self.peak: float | None = None
        self.result: dict[str, Any] = {
            "device": str(device),
            "variants": [],
            "budgets": [],
            "padding": [],
        }
        if device.type == "cuda":
            name = torch.cuda.get_device_name(device)
            self.peak = dense_peak_flops(name)
            self.result |= {
                "device": name,
                "dense_fp16_peak_tflops": self.peak / 1e12,
                "matmul_tflops": matmul_tflops(),
            }
        self._encoders: dict[str, Any] = {}
        self._references: dict[str, np.ndarray] = {}

    def _encoder(self, shape: BertShape, model_dir: Path) -> Any:
        if shape.name not in self._encoders:
            encoder_module, _ = packed_modules()
            self._encoders[shape.name] = encoder_module.load_encoder(
                model_dir, "mean", self.device, self.dtype
            )
        return self._encoders[shape.name]

    def _reference(self, shape: BertShape, model_dir: Path, max_length: int) -> np.ndarray:
        """sentence-transformers' float32 embeddings of CHECK_TEXTS on the
        same weights, once per shape."""
        if shape.name not in self._references:
            self._references[shape.name] = reference_embeddings(
                model_dir, list(CHECK_TEXTS), max_length, self.device.type
            )
        return self._references[shape.name]

    def variant(
        self, name: str, shape: BertShape, model_dir: Path, max_length: int
    ) -> dict[str, Any]:
        """Measures one variant of the encoder of `shape` and records it."""
        variant = VARIANTS[name]
        encoder_module, rows_module = packed_modules()
        encoder = self._encoder(shape, model_dir)
        # A fresh compile per variant: dynamo would otherwise reuse the code
        # it compiled for the blocks in an earlier variant's mode.
        torch._dynamo.reset()
        mode = encoder_module.SERVED_COMPILE_MODE if variant.compile_mode == SERVED else None
        encoder.place(self.device, self.dtype, mode or variant.compile_mode)
        served_gelu = [layer.approximate for layer in encoder.layers]
        for layer in encoder.layers:
            layer.approximate = variant.gelu or layer.approximate
        try:
            record: dict[str, Any] = {
                "shape": shape.name,
                "variant": name,
                **asdict(variant),
                "attention": encoder.attention_name,
            }
            started = time.perf_counter()
            forward = None
            if variant.graphs:
                forward = packed_graphs().BucketedEncoder(
                    encoder, graph_token_buckets(), max_batch_size()
                )
                if self.device.type == "cuda":
                    capture = forward.capture()
                    record |= {
                        "capture_s": capture.seconds,
                        "graph_mib": capture.memory_bytes / 2**20,
                    }
            # The first call, compiling where the variant compiles, is the
            # cosine check's: CHECK_TEXTS against sentence-transformers.
            ids, mask = check_texts(max_length)
            embedding, _ = rows_module.embed_packed(
                encoder, ids, mask, tokens_per_forward(), forward
            )
            record["warm_up_s"] = time.perf_counter() - started
            reference = self._reference(shape, model_dir, max_length)
            cosines = np.sum(embedding * reference, axis=1) / np.linalg.norm(reference, axis=1)
            record["min_cosine"] = float(cosines.min())
            record["workloads"] = [
                workload(encoder, forward, shape, self.scale.rows, length, self.peak, self.scale)
                for length in WORKLOAD_LENGTHS
                if length <= max_length
            ]
        finally:
            for layer, approximate in zip(encoder.layers, served_gelu, strict=True):
                layer.approximate = approximate
        self.result["variants"].append(record)
        return record

    def budgets(self, shape: BertShape, model_dir: Path, max_length: int) -> None:
        """The encoder host to host at each of the scale's token budgets per
        forward, with the GPU memory each needs at its peak: eager, as a
        forward runs where no graph bucket holds it (each budget would need
        its own buckets' graphs)."""
        _, rows_module = packed_modules()
        encoder = self._encoder(shape, model_dir)
        torch._dynamo.reset()
        encoder.place(self.device, self.dtype, None)
        for budget in self.scale.budgets:
            for length in WORKLOAD_LENGTHS:
                if length > max_length:
                    continue
                generator = torch.Generator().manual_seed(length)
                ids = _random_ids(self.scale.rows, length, generator).numpy()
                mask = np.ones_like(ids)
                if self.device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(self.device)
                wall_ms, cpu_ms = _host_ms(
                    partial(rows_module.embed_packed, encoder, ids, mask, budget), self.scale
                )
                forwards = len(rows_module.forward_spans([length] * self.scale.rows, budget))
                peak = (
                    torch.cuda.max_memory_allocated(self.device) / 2**20
                    if self.device.type == "cuda"
                    else None
                )
                self.result["budgets"].append(
                    {
                        "shape": shape.name,
                        "budget": budget,
                        "rows": self.scale.rows,
                        "length": length,
                        "forwards": forwards,
                        "host_to_host_tokens_per_s": _rate(ids.size, wall_ms),
                        "cpu_ms_per_forward": cpu_ms / forwards,
                        "peak_mib": peak,
                    }
                )

    def padding(self, shape: BertShape, model_dir: Path, max_length: int) -> None:
        """The packed encoder (eager, as budgets) against three padded ways
        (GPU only)."""
        encoder = self._encoder(shape, model_dir)
        torch._dynamo.reset()
        encoder.place(self.device, self.dtype, None)
        padded = padded_encoder.load_encoder(model_dir, "mean", self.device, self.dtype)
        self.result["padding"] += padding_comparison(encoder, padded, shape, max_length)
        del padded
        torch.cuda.empty_cache()


def padding_comparison(
    encoder: Any, padded: Any, shape: BertShape, max_length: int
) -> list[dict[str, Any]]:
    """Rows of mixed real lengths (uniform in 8..max_length, seeded) embedded
    packed and three padded ways (the padded encoder), as useful
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
    # Ends on the host, so the host clock.
    host_clock = torch.device("cpu")
    with torch.inference_mode():
        for name, run in ways.items():
            milliseconds = _median_ms(run, host_clock, Scale.for_device(torch.device("cuda")))
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
