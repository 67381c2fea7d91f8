"""Where the time of one encoder forward goes: the forward's work, grouped
into matrix products, attention (by its backend's kernel names: flash,
fmha, ...), torch.compile's fused Triton kernels, normalization,
elementwise, copies and the idle gaps between them, as a table per shape
for the GPU report. The kit's other numbers say how fast a forward is;
this says which part to work on next, and how much of a forward is the
GPU waiting on the host (launch and Python overhead) rather than working.

`kernel_table` profiles a callable with torch.profiler. On CUDA the
intervals are the device's own (kernels, memcpy, memset). On CPU, where
the tests run it, they are the CPU ops, each op's time counted once: an op
whose name falls in a category other than "other" counts whole, with
everything it calls (aten::linear with its addmm, and the bias copy
addmm makes); above such ops, an uncategorized op (aten::embedding)
counts only its own time, outside its children. Counting only the leaf
ops would not do: aten::addmm has children, so its own matrix-product
time would be lost.

`table_lines` renders the table as markdown and needs no torch, so the
report can run where torch is not installed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import torch

OTHER = "other"
# Name -> category: the first pattern that matches wins. Attention comes
# before matrix products, since attention kernels can be CUTLASS-built
# (fmha_cutlassF_..._sm80) or carry an architecture (FlashAttnFwdSm90).
# The fused Triton kernels come before normalization and elementwise,
# whose op names they carry (triton_per_fused_add_native_layer_norm_0).
# On CPU aten::copy_ is elementwise, as a device-side copy kernel
# (direct_copy_kernel, elementwise) is on the GPU: "copies" means only the
# GPU's memcpy and memset, host<->device transfers and fills, of which CPU
# runs have none.
CATEGORIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "attention",
        re.compile(r"flash|fmha|attn|attention|scaled_dot_product", re.IGNORECASE),
    ),
    (
        "matrix products",
        re.compile(
            r"gemm|cutlass|cublas|xmma|nvjet|sm90_|sm80_"
            r"|^aten::(linear|addmm|mm|bmm|baddbmm|matmul)$",
            re.IGNORECASE,
        ),
    ),
    ("fused reductions (Triton)", re.compile(r"triton_(per|red)_")),
    ("fused pointwise (Triton)", re.compile(r"triton_poi_")),
    ("normalization", re.compile(r"layer_?norm", re.IGNORECASE)),
    ("copies", re.compile(r"^(Memcpy|Memset)")),
    (
        "elementwise",
        re.compile(
            r"elementwise|vectorized|unrolled|add|mul|div|gelu|index|cat|copy|fill",
            re.IGNORECASE,
        ),
    ),
    (OTHER, re.compile("")),
)
TOP = 8
NAME_WIDTH = 80


class Interval(NamedTuple):
    """One piece of work: its name, start and end in microseconds, and
    the calls it counts (0 for the later pieces of one op's own time)."""

    name: str
    start: float
    end: float
    calls: int = 1


def category(name: str) -> str:
    """The category of a kernel or op name (CATEGORIES, first match)."""
    return next(label for label, pattern in CATEGORIES if pattern.search(name))


def kernel_table(
    run: Callable[[], object], device: torch.device, repeats: int = 3
) -> dict[str, Any]:
    """Runs `run` once to warm up, then `repeats` times under the
    profiler, and returns where the time of one run went (summarize)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    on_cuda = device.type == "cuda"
    run()
    if on_cuda:
        torch.cuda.synchronize(device)
    activities = [ProfilerActivity.CPU]
    if on_cuda:
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as profiler:
        for _ in range(repeats):
            run()
        if on_cuda:
            torch.cuda.synchronize(device)
    events = list(profiler.events())
    intervals = _device_intervals(events) if on_cuda else _cpu_intervals(events)
    return summarize(intervals, device.type, repeats)


def _is_annotation(event: Any) -> bool:
    # record_function ranges (torch.compile's among them) mirrored on the
    # GPU timeline span many kernels: not work of their own. An attribute
    # in FunctionEvent (torch 2.11 and 2.15); `is True` keeps everything
    # should it ever be something else.
    return getattr(event, "is_user_annotation", False) is True


def _device_intervals(events: Iterable[Any]) -> list[Interval]:
    """The device's kernels, memcpy and memset."""
    from torch.profiler import DeviceType

    return [
        Interval(event.name, event.time_range.start, event.time_range.end)
        for event in events
        if event.device_type == DeviceType.CUDA and not _is_annotation(event)
    ]


def _cpu_intervals(events: Iterable[Any]) -> list[Interval]:
    """The CPU ops, each microsecond once: a categorized op or a leaf op
    whole, an uncategorized op above them by its own time."""
    from torch.profiler import DeviceType

    roots = [
        event
        for event in events
        if event.device_type == DeviceType.CPU and not event.is_async and event.cpu_parent is None
    ]
    intervals: list[Interval] = []
    pending = list(roots)
    while pending:
        event = pending.pop()
        start, end = event.time_range.start, event.time_range.end
        children = sorted(event.cpu_children, key=lambda child: child.time_range.start)
        if not children or category(event.name) != OTHER:
            intervals.append(Interval(event.name, start, end))
            continue
        calls = 1
        for child in children:
            if child.time_range.start > start:
                intervals.append(Interval(event.name, start, child.time_range.start, calls))
                calls = 0
            start = max(start, child.time_range.end)
        if end > start:
            intervals.append(Interval(event.name, start, end, calls))
        pending.extend(children)
    return intervals


def _union_us(intervals: Iterable[Interval]) -> float:
    """The length of the union of the intervals."""
    total, reach = 0.0, float("-inf")
    for interval in sorted(intervals, key=lambda interval: interval.start):
        if interval.end > reach:
            total += interval.end - max(interval.start, reach)
            reach = interval.end
    return total


def _round(value: float, digits: int = 4) -> float:
    """`value` to `digits` significant digits."""
    return float(f"{value:.{digits}g}")


def summarize(intervals: list[Interval], device_type: str, repeats: int) -> dict[str, Any]:
    """Per run: the span from the first interval's start to the last's
    end, the busy time (the intervals' union) and the idle rest, ms and
    calls per category (share: of the span; on a GPU, kernels that
    overlap count in full, so the categories may add up past busy), and
    the TOP names by ms."""
    if not intervals:
        raise ValueError("the profiler recorded no work")
    span_us = max(interval.end for interval in intervals) - min(
        interval.start for interval in intervals
    )
    busy_us = _union_us(intervals)
    by_category: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for interval in intervals:
        for totals in (by_category[category(interval.name)], by_name[interval.name]):
            totals[0] += interval.calls
            totals[1] += interval.end - interval.start

    def per_run_ms(us: float) -> float:
        return _round(us / repeats / 1000)

    categories = [
        {
            "category": label,
            "calls": _round(calls / repeats),
            "ms": per_run_ms(us),
            "share": _round(us / span_us if span_us else 0.0, 3),
        }
        for label, (calls, us) in sorted(by_category.items(), key=lambda item: -item[1][1])
    ]
    top = [
        {
            "name": name[:NAME_WIDTH],
            "category": category(name),
            "calls": _round(calls / repeats),
            "ms": per_run_ms(us),
        }
        for name, (calls, us) in sorted(by_name.items(), key=lambda item: -item[1][1])[:TOP]
    ]
    return {
        "device": device_type,
        "repeats": repeats,
        "span_ms": per_run_ms(span_us),
        "busy_ms": per_run_ms(busy_us),
        "idle_ms": per_run_ms(span_us - busy_us),
        "categories": categories,
        "top": top,
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table_lines(table: dict[str, Any]) -> list[str]:
    """kernel_table's result as markdown: the categories with the idle
    gaps, then the top kernels (or ops, on CPU)."""
    span = float(table["span_ms"])
    on_gpu = table["device"] == "cuda"
    work = "kernel" if on_gpu else "op"
    counting = (
        "kernels that overlap count in full in each category, which may then add up past busy"
        if on_gpu
        else "each op's time counts once, in the category of the outermost categorized op"
    )
    lines = [
        f"| where one forward's time goes ({table['device']}) | calls per forward "
        "| ms per forward | share of span |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {row['category']} | {row['calls']:g} | {row['ms']:.3f} | {row['share']:.1%} |"
        for row in table["categories"]
    ]
    idle_share = table["idle_ms"] / span if span else 0.0
    lines += [
        f"| idle gaps (nothing running) | | {table['idle_ms']:.3f} | {idle_share:.1%} |",
        "",
        f"Span {span:.3f} ms per forward, busy {table['busy_ms']:.3f} ms, over "
        f"{table['repeats']} profiled runs; {counting}.",
        "",
        f"| top {work}s | category | calls per forward | ms per forward |",
        "|---|---|---:|---:|",
    ]
    lines += [
        f"| `{_cell(row['name'])}` | {row['category']} | {row['calls']:g} | {row['ms']:.3f} |"
        for row in table["top"]
    ]
    return lines
