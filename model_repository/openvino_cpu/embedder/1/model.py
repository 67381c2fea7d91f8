"""Triton Python model: token ids -> unit-length embedding and its norm,
running the exported graph as OpenVINO IR (1/model.xml, written by
export/export_openvino.py) on the CPU.

The request handling is the ONNX embedder's (model_common): the same checks,
errors and length-sorted rows. What differs is how they are grouped and run:
groups are capped in tokens, not rows, and OpenVINO streams, one thread
each, run the groups of one execute call at the same time, so a single
instance keeps every core busy however the dynamic batcher merged the
requests.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import openvino as ov
import triton_python_backend_utils as pb_utils
from model_common.rows import Embeddings, Tokens, groups_by_tokens
from model_common.triton import GroupedEmbedder

# What OpenVINO raises when a request's values break the graph.
_RUN_ERRORS = (RuntimeError,)
PRECISIONS = ("auto", "bf16", "f32")


def cache_dir(model_xml: Path, precision: str, streams: int) -> Path:
    """Where OpenVINO keeps compiled models, so a restart loads instead of
    compiling again. OpenVINO keys a blob by the model file's path, not its
    content or all compile options: each export of the IR (its files' sizes
    and times) and each setting gets its own folder, so a new export or a
    bf16 load never reuses an older or f32 blob."""
    stats = [path.stat() for path in (model_xml, model_xml.with_suffix(".bin"))]
    stamp = "".join(f"{stat.st_size}:{stat.st_mtime_ns};" for stat in stats)
    export = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "triton-embedding" / "openvino" / f"{export}-{precision}-{streams}streams"


def compile_cached(
    core: ov.Core, model_xml: Path, precision: str, streams: int
) -> ov.CompiledModel:
    """Compiles `model_xml` for the CPU through the model cache. The file's
    real path is compiled, so repository copies that link the shipped IR share
    one blob; a lock on the folder lets one process (another instance or
    server) write a blob while the others wait, then load it, instead of
    writing the same file at once and failing."""
    options = {
        "INFERENCE_PRECISION_HINT": precision,
        "NUM_STREAMS": streams,
        "INFERENCE_NUM_THREADS": streams,
        # Each instance is its own process, and OpenVINO pins every process's
        # first stream to the same core: two instances running one group
        # each would share that core while the other idled
        # (perf/results/debian12-2core/batching_choices.md, "No CPU pinning").
        "ENABLE_CPU_PINNING": False,
    }
    model_xml = model_xml.resolve()
    model_path = str(model_xml)
    cache = cache_dir(model_xml, precision, streams)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        lock = (cache / ".lock").open("a")
    except OSError as error:
        pb_utils.Logger.log_warn(f"embedder: no OpenVINO model cache ({error}); compiling")
        return core.compile_model(model_path, "CPU", options)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return core.compile_model(model_path, "CPU", {**options, "CACHE_DIR": str(cache)})


def served_precision(wanted: str, exported: str, capabilities: Sequence[str]) -> str:
    """The inference precision to compile for. `auto` takes what the export
    checked against sentence-transformers (bf16 only if it kept the cosine
    bar), on a processor that runs bfloat16."""
    if wanted not in PRECISIONS:
        raise ValueError(f"parameter 'precision' is {wanted!r}; expected one of {PRECISIONS}")
    if wanted == "bf16" and "BF16" not in capabilities:
        raise ValueError("parameter 'precision' is 'bf16', but this processor has no bfloat16")
    if wanted == "auto":
        return "bf16" if exported == "bf16" and "BF16" in capabilities else "f32"
    return wanted


class TritonPythonModel(GroupedEmbedder):
    def initialize(self, args: dict[str, str]) -> None:
        setup = self._set_up(args, _RUN_ERRORS)
        self._tokens_per_run = setup.integer("tokens_per_run")
        self._streams = setup.integer("streams")

        core = ov.Core()
        exported = str(dict(setup.record.fields.get("openvino") or {}).get("precision", "f32"))
        precision = served_precision(
            setup.parameters["precision"],
            exported,
            core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"),
        )
        compiled = compile_cached(core, setup.version_dir / "model.xml", precision, self._streams)
        self._outputs = (compiled.output("embedding"), compiled.output("norm"))
        self._queue = ov.AsyncInferQueue(compiled, self._streams)
        pb_utils.Logger.log_info(
            f"embedder: OpenVINO {ov.get_version()}, precision {precision}, "
            f"{self._streams} stream(s) of one thread"
        )

    def _cut_groups(self, lengths: np.ndarray) -> list[np.ndarray]:
        return groups_by_tokens(lengths, self._tokens_per_run, self._streams)

    def _run_groups(self, groups: Sequence[Tokens]) -> list[Embeddings]:
        results: list[Embeddings | None] = [None] * len(groups)
        errors: list[BaseException] = []
        embedding_output, norm_output = self._outputs

        def collect(request: ov.InferRequest, index: int) -> None:
            # Runs on an OpenVINO thread; the request's buffers are reused.
            try:
                results[index] = (
                    request.get_tensor(embedding_output).data.copy(),
                    request.get_tensor(norm_output).data.copy(),
                )
            except RuntimeError as error:
                errors.append(error)

        self._queue.set_callback(collect)
        try:
            for index, (input_ids, attention_mask) in enumerate(groups):
                self._queue.start_async(
                    {"input_ids": input_ids, "attention_mask": attention_mask}, userdata=index
                )
        finally:
            # Groups already started must finish before the next call reuses
            # the queue.
            self._queue.wait_all()
        if errors:
            raise errors[0]
        return [result for result in results if result is not None]
