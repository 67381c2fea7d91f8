"""How an OpenVINO graph runs on the cores, declared once for the export's
checks, the launcher's load probe and the stages that serve it: the
inference precision, and how many threads each stream runs. Standard
library only.

One thread per stream is the layout served: each instance's streams run an
execute call's groups side by side
(model_repository/openvino_cpu/embedder/config.pbtxt). OpenVINO 2026.4.1
dies of SIGFPE compiling a decoder's graph in bf16 with one thread per
stream on Xeons with AMX, and compiles it with two (docs/performance.md,
"When the engine dies"): where a precision's one-thread layout dies, two
threads per stream is tried before the next precision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# OpenVINO's precisions, most preferred first.
PRECISIONS = ("bf16", "f32")
# The layouts tried for one precision, in order: the next only where the
# engine died on the one before.
THREADS_PER_STREAM = (1, 2)
# The stage parameters that choose a setting; `auto` takes the export's.
PRECISION_PARAMETER = "precision"
THREADS_PER_STREAM_PARAMETER = "threads_per_stream"
AUTO = "auto"
PRECISION_CHOICES = (AUTO, *PRECISIONS)
# The input shapes whose kernels a compiled graph keeps, least recently used
# dropped. Requests bring new (batch, length) pairs at will and each kept one
# holds about 1.5 MB: OpenVINO's default of 5000 let a stage grow by
# gigabytes as it served, and none kept made every call slower
# (perf/results/debian12-2core/openvino_shape_cache.md).
SHAPES_KEPT = 64
SHAPES_KEPT_OPTION = "CPU_RUNTIME_CACHE_CAPACITY"


@dataclass(frozen=True)
class Setting:
    precision: str
    threads_per_stream: int = 1

    @property
    def label(self) -> str:
        if self.threads_per_stream == 1:
            return self.precision
        return f"{self.precision} ({self.threads_per_stream} threads per stream)"

    def threads(self, wanted: int) -> int:
        """The threads a stage asking for `wanted` runs: at least one stream's."""
        return max(wanted, self.threads_per_stream)

    def streams(self, wanted: int) -> int:
        """The streams a stage asking for `wanted` threads runs."""
        return max(1, self.threads(wanted) // self.threads_per_stream)

    def options(self, wanted: int) -> dict[str, object]:
        """compile_model's options for a stage asking for `wanted` threads."""
        return {
            "INFERENCE_PRECISION_HINT": self.precision,
            "NUM_STREAMS": self.streams(wanted),
            "INFERENCE_NUM_THREADS": self.threads(wanted),
            # Each instance is its own process, and OpenVINO pins every
            # process's first stream to the same core: two instances running
            # one group each would share that core while the other idled
            # (perf/results/debian12-2core/batching_choices.md, "No CPU pinning").
            "ENABLE_CPU_PINNING": False,
            SHAPES_KEPT_OPTION: SHAPES_KEPT,
        }

    def record(self) -> dict[str, object]:
        return {"precision": self.precision, "threads_per_stream": self.threads_per_stream}


def ladder(precisions: Sequence[str]) -> tuple[Setting, ...]:
    """Every setting worth trying for these precisions, in the order tried."""
    return tuple(Setting(p, t) for p in precisions for t in THREADS_PER_STREAM)


def precision_candidates(has_bf16: bool) -> tuple[str, ...]:
    """The precisions worth measuring on a processor with or without bfloat16."""
    return tuple(p for p in PRECISIONS if p != "bf16" or has_bf16)


def exported_setting(openvino: Mapping[str, object]) -> Setting:
    """The setting an export record's "openvino" part checked and serves."""
    return Setting(
        str(openvino.get("precision", "f32")), int(str(openvino.get("threads_per_stream", 1)))
    )


def served_setting(
    parameters: Mapping[str, str],
    openvino: Mapping[str, object],
    capabilities: Sequence[str],
    processor_class: str,
) -> Setting:
    """The setting a stage compiles, from its parameters against its export
    record's "openvino" part. `auto` serves bf16 only where the export kept
    its bar in bf16 on a processor of this class (its rounding differs from
    one class to another), f32 otherwise; a forced precision serves that one;
    threads per stream are the export's for its own precision, else one,
    unless a parameter names them. Raises ValueError naming a bad parameter."""
    wanted = parameters.get(PRECISION_PARAMETER, AUTO)
    if wanted not in PRECISION_CHOICES:
        raise ValueError(
            f"parameter {PRECISION_PARAMETER!r} is {wanted!r}; expected one of {PRECISION_CHOICES}"
        )
    has_bf16 = "BF16" in capabilities
    if wanted == "bf16" and not has_bf16:
        raise ValueError(
            f"parameter {PRECISION_PARAMETER!r} is 'bf16', but this processor has no bfloat16"
        )
    exported = exported_setting(openvino)
    if wanted == AUTO:
        checked_here = openvino.get("processor_class") == processor_class
        keeps_bf16 = exported.precision == "bf16" and has_bf16 and checked_here
        wanted = "bf16" if keeps_bf16 else "f32"
    threads = parameters.get(THREADS_PER_STREAM_PARAMETER, AUTO)
    if threads == AUTO:
        return Setting(wanted, exported.threads_per_stream if exported.precision == wanted else 1)
    if threads not in {str(t) for t in THREADS_PER_STREAM}:
        raise ValueError(
            f"parameter {THREADS_PER_STREAM_PARAMETER!r} is {threads!r}; expected one of "
            f"{[AUTO, *map(str, THREADS_PER_STREAM)]}"
        )
    return Setting(wanted, int(threads))
