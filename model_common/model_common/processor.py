"""This machine's x86-64 class, read from /proc/cpuinfo. The classes seen
on these machines differ in what the CPU engines can use (bfloat16 for
OpenVINO's bf16 precision, VNNI for ONNX Runtime's int8 kernels, AMX tiles)
and in how the engines fail: an export records the class it checked its
precision on, and serving re-checks a graph exported on another class
(docs/performance.md, "When the engine dies"). CI's log, the perf reports
and the tests' skip reasons name it too.

    PYTHONPATH=model_common python3 -m model_common.processor    (standard library only)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

# Most capable first: a processor's class is the first whose flag it has.
CLASSES = (
    ("amx_bf16", "amx"),
    ("avx512_bf16", "avx512_bf16"),
    ("avx512f", "avx512"),
    ("avx2", "avx2"),
)
# The flags a report names, in this order.
NAMED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class Processor:
    name: str
    family: str
    model: str
    cpus: int
    flags: frozenset[str]

    @property
    def cls(self) -> str:
        return next((name for flag, name in CLASSES if flag in self.flags), "pre-avx2")

    @property
    def has_bf16(self) -> bool:
        return bool({"avx512_bf16", "amx_bf16"} & self.flags)

    def describe(self) -> str:
        named = [flag for flag in NAMED_FLAGS if flag in self.flags]
        return (
            f"{self.name} (family {self.family}, model {self.model}), {self.cpus} CPUs, "
            f"class {self.cls}: {' '.join(named) or 'none of ' + ' '.join(NAMED_FLAGS)}"
        )


@cache
def this_processor() -> Processor:
    blocks = [block for block in Path("/proc/cpuinfo").read_text().split("\n\n") if block.strip()]
    # The first processor's block; every core of these machines is alike.
    fields = {
        key.strip(): value.strip()
        for key, _, value in (line.partition(":") for line in blocks[0].splitlines())
    }
    return Processor(
        name=fields.get("model name", "unknown"),
        family=fields.get("cpu family", "?"),
        model=fields.get("model", "?"),
        cpus=len(blocks),
        flags=frozenset(fields.get("flags", "").split()),
    )


if __name__ == "__main__":
    print(f"processor: {this_processor().describe()}")
