"""The packed encoder's variants the GPU kit measures in process
(perf/gpu/inprocess.py), one by one beside the shipped one. No torch here:
the run's arguments name them before torch is imported.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    description: str
    # torch.compile's mode for the blocks; "served" for the embedder's own.
    compile_mode: str | None
    graphs: bool = False
    # functional.gelu's approximation in place of the model's ("none": erf).
    gelu: str | None = None


SERVED = "served"
# In the order they run, the shipped one first (a run cut short keeps the
# baseline). The compile cache a variant fills serves the next that
# compiles the same code: warm-up times after the first are with it warm.
VARIANTS = {
    "graphs": Variant(
        "compiled, CUDA graphs of the config's token buckets (shipped)", SERVED, graphs=True
    ),
    "eager": Variant("eager: every op its own kernel (served without buckets)", None),
    "compiled": Variant("torch.compile of the blocks, run call by call", SERVED),
    "tanh-gelu": Variant("compiled, tanh GELU in place of erf", SERVED, gelu="tanh"),
    "max-autotune": Variant(
        "compiled by max-autotune: GEMM templates with bias and GELU in the epilogue",
        "max-autotune-no-cudagraphs",
    ),
}
