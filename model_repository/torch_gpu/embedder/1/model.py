"""Triton Python model: token ids -> unit-length embedding and its norm, on
PyTorch with packed rows (packed_encoder.py, packed_rows.py beside this
file): float16 on the instance's GPU, float32 on CPU.

Same contract and request-level behaviour as the ONNX embedder
(model_repository/onnx_cpu/embedder): ragged requests share one execute
call; limits and bad tokens fail only their own request. The call's rows
run without padding, in forwards of at most tokens_per_forward tokens,
replayed as CUDA graphs where the config names token buckets. The
weights are the HuggingFace checkpoint the ONNX export was made from
(model_dir in 1/export.json, which export/export_onnx.py writes here).
"""

from __future__ import annotations

import fcntl
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from model_common.embedder import Embedder
from model_common.embedder_setup import EmbedderSetup
from model_common.rows import Embeddings
from packed_encoder import SERVED_COMPILE_MODE, load_encoder
from packed_graphs import GRAPH_TOKENS_PARAMETER, BucketedEncoder, parse_buckets
from packed_rows import Forward, embed_packed

# A warm-up forward at load: where the blocks are compiled, it compiles
# them, so the first request does not wait for it and a compile failure
# fails the load.
_WARM_UP_ROWS = 4


# Where GPU instances take turns compiling (Triton may load them at once).
_COMPILE_LOCK = Path(tempfile.gettempdir()) / "torch_gpu_embedder.compile.lock"


@contextmanager
def _one_instance_at_a_time(device: torch.device) -> Iterator[None]:
    """On CUDA, holds a lock that the machine's other instances wait for:
    the first compiles the blocks (and captures), and the others find the
    kernels in torch.compile's on-disk caches, which every process of this
    user shares, instead of compiling the same code at once."""
    if device.type != "cuda":
        yield
        return
    with _COMPILE_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class TritonPythonModel(Embedder):
    def _open(self, args: Mapping[str, str], setup: EmbedderSetup) -> None:
        # One CPU thread per instance: the host work here (packing, copies)
        # is small, and instances that each started a thread per core
        # starved one another beside the tokenizer's on a GPU host
        # (perf/results/h100/report.md).
        torch.set_num_threads(1)
        record = setup.record
        self._tokens_per_forward = setup.integer("tokens_per_forward")
        if self._tokens_per_forward < record.max_seq_length:
            raise ValueError(
                f"tokens_per_forward {self._tokens_per_forward} is below the model's "
                f"max_seq_length {record.max_seq_length}: a full row would exceed one forward"
            )
        if args["model_instance_kind"] == "GPU":
            device = torch.device("cuda", int(args["model_instance_device_id"]))
            dtype = torch.float16
        else:
            device, dtype = torch.device("cpu"), torch.float32
        buckets = parse_buckets(
            setup.parameters.get(GRAPH_TOKENS_PARAMETER, ""), self._tokens_per_forward
        )
        # The blocks are compiled only where CUDA graphs replay them: run
        # call by call, the compiled blocks' host cost per call made the
        # encoder about 3x slower host to host than eager on an H100
        # (perf/results/h100/report.md, run4).
        self._encoder = load_encoder(
            Path(str(record.fields["model_dir"])),
            str(record.fields["pooling"]),
            device,
            dtype,
            SERVED_COMPILE_MODE if buckets else None,
        )
        self._forward: Forward | None = None
        with _one_instance_at_a_time(device):
            if buckets:
                bucketed = BucketedEncoder(self._encoder, buckets, setup.max_batch_size)
                if device.type == "cuda":
                    capture = bucketed.capture()
                    pb_utils.Logger.log_info(
                        f"embedder: CUDA graphs for {buckets} tokens captured in "
                        f"{capture.seconds:.1f} s, {capture.memory_bytes / 2**20:.0f} MiB"
                    )
                self._forward = bucketed
            self._warm_up(device, record.max_seq_length)

    def _warm_up(self, device: torch.device, max_seq_length: int) -> None:
        ids = np.full((_WARM_UP_ROWS, max_seq_length), 1, np.int64)
        started = time.perf_counter()
        self._embed_rows(ids, np.ones_like(ids))
        pb_utils.Logger.log_info(
            f"embedder: warm-up forward on {device} in {time.perf_counter() - started:.1f} s"
        )

    # No run errors to isolate (Embedder.run_errors is empty): the token
    # checks already refused any request whose values the encoder could not take.
    def _embed_rows(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> Embeddings:
        return embed_packed(
            self._encoder, input_ids, attention_mask, self._tokens_per_forward, self._forward
        )
