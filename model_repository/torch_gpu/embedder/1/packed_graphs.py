"""The packed encoder's forward at a few fixed token counts (buckets), each
recorded once as a CUDA graph and replayed: a forward then costs the host
one launch instead of one per kernel, which is what bounds short texts on
a GPU (perf/results/h100/report.md: ~3.8 ms of CPU per forward).

A graph replays fixed shapes, so a forward's packed rows are padded up to
the smallest bucket that holds them: spare tokens after the real ones, in
no sequence, and spare rows of no tokens, up to the bucket's row capacity
(PackedRows). The attention kernel's length bound is the model's max
length, a constant a graph can hold. A forward larger than every bucket
runs eagerly.

Graphs need the variable-length attention kernel, which reads the rows'
bounds from the GPU; the per-sequence attention loops over them on the
host. On CPU nothing is captured: the padded forward runs eagerly, which
is how the tests check the padding.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from packed_attention import PackedRows
from packed_encoder import PackedEncoder

# The config parameter naming the buckets (config.pbtxt).
GRAPH_TOKENS_PARAMETER = "cuda_graph_tokens"
# Forwards run before a capture: the first compiles the blocks for the
# shape, the next lets cuBLAS and the allocator settle, as capture wants.
_WARM_UP_FORWARDS = 2


@dataclass(frozen=True)
class Capture:
    """What recording the graphs cost."""

    seconds: float
    # The device memory the graphs' shared pool and inputs hold.
    memory_bytes: int


@dataclass(frozen=True)
class _Graph:
    graph: torch.cuda.CUDAGraph
    inputs: PackedRows  # the buffers a replay reads
    pooled: torch.Tensor  # the buffer a replay writes


def pad(rows: PackedRows, tokens: int, capacity: int, max_length: int) -> PackedRows:
    """`rows` (on the host) padded to `tokens` tokens and `capacity` rows,
    with attention bounded by `max_length`."""
    real_tokens, real_rows = rows.tokens.shape[1], rows.real_rows
    ids = torch.zeros((2, tokens), dtype=torch.int64)
    ids[:, :real_tokens] = rows.tokens
    cu_seqlens = torch.full((capacity + 1,), real_tokens, dtype=torch.int32)
    cu_seqlens[: real_rows + 1] = rows.cu_seqlens
    row_of_token = torch.full((tokens,), capacity, dtype=torch.int64)
    row_of_token[:real_tokens] = rows.row_of_token
    return PackedRows(ids, cu_seqlens, row_of_token, rows.bounds, max_length)


def parse_buckets(value: str, tokens_per_forward: int) -> tuple[int, ...]:
    """The config's comma-separated token counts, ascending; empty for none.
    Each must be a positive integer within the forward's token budget."""
    buckets = []
    for item in (part.strip() for part in value.split(",") if part.strip()):
        if not item.isdigit() or int(item) == 0:
            raise ValueError(f"CUDA graph bucket {item!r} is not a positive token count")
        if int(item) > tokens_per_forward:
            raise ValueError(
                f"CUDA graph bucket {item} exceeds tokens_per_forward {tokens_per_forward}: "
                "no forward would fill it"
            )
        buckets.append(int(item))
    return tuple(sorted(set(buckets)))


class BucketedEncoder:
    """Runs packed rows at bucket shapes: by graph replay once captured,
    eagerly before (and on CPU)."""

    def __init__(self, encoder: PackedEncoder, buckets: Sequence[int], max_rows: int) -> None:
        self._encoder = encoder
        self._buckets = tuple(sorted(buckets))
        self._max_rows = max_rows
        self._graphs: dict[int, _Graph] = {}

    def _capacity(self, bucket: int) -> int:
        # Every real row holds at least one token.
        return min(self._max_rows, bucket)

    def _bucket(self, rows: PackedRows) -> int | None:
        total = rows.tokens.shape[1]
        for bucket in self._buckets:
            if total <= bucket and rows.real_rows <= self._capacity(bucket):
                return bucket
        return None

    def __call__(self, rows: PackedRows) -> torch.Tensor:
        """Pooled [real rows, hidden] of host-packed rows, on the device."""
        device = self._encoder.device
        bucket = self._bucket(rows)
        if bucket is None:
            return self._encoder(rows.to(device))
        padded = pad(rows, bucket, self._capacity(bucket), self._encoder.max_positions)
        graph = self._graphs.get(bucket)
        if graph is None:
            return self._encoder(padded.to(device))[: rows.real_rows]
        for name in PackedRows.DEVICE_FIELDS:
            target: torch.Tensor = getattr(graph.inputs, name)
            target.copy_(getattr(padded, name).pin_memory(), non_blocking=True)
        graph.graph.replay()
        # The next replay of any bucket reuses the pool: keep this one's rows.
        return graph.pooled[: rows.real_rows].clone()

    def _sample(self, bucket: int) -> PackedRows:
        """Rows of real tokens within `bucket`'s shape, for capture: as many
        rows of the max length as it holds, or one shorter row."""
        length = min(self._encoder.max_positions, bucket)
        count = min(bucket // length, self._capacity(bucket))
        ids = torch.ones((count, length), dtype=torch.int64)
        positions = torch.arange(length).expand(count, length)
        bounds = tuple(range(0, count * length + 1, length))
        rows = PackedRows(
            torch.stack([ids.flatten(), positions.flatten()]),
            torch.tensor(bounds, dtype=torch.int32),
            torch.arange(count).repeat_interleave(length),
            bounds,
            length,
        )
        return pad(rows, bucket, self._capacity(bucket), self._encoder.max_positions)

    @torch.inference_mode()
    def capture(self) -> Capture:
        """Records a graph per bucket on the encoder's GPU, largest first: the
        graphs share one memory pool, which the largest sizes."""
        device = self._encoder.device
        if device.type != "cuda" or self._encoder.attention_name != "varlen_attn":
            raise ValueError(
                "CUDA graphs need the encoder on CUDA with variable-length attention; "
                f"it runs {self._encoder.attention_name} on {device}"
            )
        started, before = time.perf_counter(), torch.cuda.memory_reserved(device)
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(device)
        for bucket in reversed(self._buckets):
            inputs = self._sample(bucket).to(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(_WARM_UP_FORWARDS):
                    self._encoder(inputs)
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                pooled = self._encoder(inputs)
            self._graphs[bucket] = _Graph(graph, inputs, pooled)
        torch.cuda.synchronize(device)
        return Capture(
            seconds=time.perf_counter() - started,
            memory_bytes=torch.cuda.memory_reserved(device) - before,
        )
