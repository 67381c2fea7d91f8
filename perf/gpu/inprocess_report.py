"""The GPU report's in-process section (perf/gpu/report.py): the packed
encoder's variants side by side, where each forward's time goes, and the
padding comparison, from the in_process part of a run's results.json
(perf/gpu/inprocess.py). Runs made before the variants existed recorded
one `throughput` table, rendered as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from perf.gpu.profile import table_lines

SHIPPED = "graphs"


def tokens_text(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    return f"{value / 1e3:.0f}K"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows),
    ]


def share_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _seconds(record: dict[str, Any], key: str) -> str:
    return f"{record[key]:.1f}" if key in record else "-"


def best_host_to_host(
    in_process: dict[str, Any] | None, shape: str, length: int
) -> tuple[float, float | None, str] | None:
    """The fastest host-to-host measurement of `shape` at `length` tokens
    per row: tokens/s, MFU and what ran it; None where not measured."""
    if in_process is None:
        return None
    candidates = [
        (row["host_to_host_tokens_per_s"], row["host_to_host_mfu"], f"{row['rows']} rows")
        for row in in_process.get("throughput", [])
        if row["shape"] == shape and row["length"] == length
    ] + [
        (
            row["host_to_host_tokens_per_s"],
            row["host_to_host_mfu"],
            f"{record['variant']}, {row['rows']} rows",
        )
        for record in in_process.get("variants", [])
        if record["shape"] == shape
        for row in record["workloads"]
        if row["length"] == length
    ]
    return max(candidates, key=lambda candidate: candidate[0]) if candidates else None


def _variant_rows(in_process: dict[str, Any]) -> list[str]:
    return markdown_table(
        (
            "shape",
            "variant",
            "what it is",
            "attention",
            "warm-up s (compile)",
            "capture s",
            "graph MiB",
            "min cosine to sentence-transformers",
        ),
        (
            (
                record["shape"],
                record["variant"],
                record["description"],
                record["attention"],
                _seconds(record, "warm_up_s"),
                _seconds(record, "capture_s"),
                f"{record['graph_mib']:.0f}" if "graph_mib" in record else "-",
                f"{record['min_cosine']:.6f}",
            )
            for record in in_process["variants"]
        ),
    )


def _throughput_rows(in_process: dict[str, Any]) -> list[str]:
    shipped = {
        (record["shape"], row["length"]): row["host_to_host_tokens_per_s"]
        for record in in_process["variants"]
        if record["variant"] == SHIPPED
        for row in record["workloads"]
    }

    def against_shipped(record: dict[str, Any], row: dict[str, Any]) -> str:
        base = shipped.get((record["shape"], row["length"]))
        return f"{row['host_to_host_tokens_per_s'] / base:.2f}x" if base else "-"

    return markdown_table(
        (
            "shape",
            "variant",
            "rows x tokens",
            "tokens per forward",
            "forward ms",
            "forward tokens/s (MFU)",
            "host-to-host tokens/s (MFU)",
            "CPU ms per forward",
            "host-to-host vs shipped",
        ),
        (
            (
                record["shape"],
                record["variant"],
                f"{row['rows']} x {row['length']}",
                f"{row['tokens_per_forward']:.0f}",
                f"{row['forward_ms']:.2f}",
                f"{tokens_text(row['forward_tokens_per_s'])} ({share_text(row['forward_mfu'])})",
                f"{tokens_text(row['host_to_host_tokens_per_s'])} "
                f"({share_text(row['host_to_host_mfu'])})",
                f"{row['cpu_ms_per_forward']:.2f}",
                against_shipped(record, row),
            )
            for record in in_process["variants"]
            for row in record["workloads"]
        ),
    )


def _profiles(in_process: dict[str, Any]) -> list[str]:
    lines = []
    for record in in_process["variants"]:
        for row in record["workloads"]:
            lines += [
                "",
                f"#### {record['shape']}, {record['variant']}: one forward of "
                f"{row['forward_tokens']} tokens ({row['length']}-token rows)",
                "",
                *table_lines(row["profile"]),
            ]
    return lines


def _legacy_throughput(in_process: dict[str, Any]) -> list[str]:
    """The single table of runs made before the variants."""
    packed = all("tokens_per_forward" in row for row in in_process["throughput"])
    extra = ("tokens per forward", "CPU ms per forward") if packed else ()
    host = (
        "embed_packed as the embedder runs it, with tokens and host-thread CPU ms per forward"
        if packed
        else "embed_in_groups as the embedder runs it"
    )
    return [
        f"Forward: token ids already on the GPU, CUDA events; host to host: {host}.",
        "",
        *markdown_table(
            (
                "shape",
                "rows",
                "tokens per row",
                "forward ms",
                "forward tokens/s",
                "forward MFU",
                "host-to-host ms",
                "host-to-host tokens/s",
                "host-to-host MFU",
                *extra,
            ),
            (
                (
                    row["shape"],
                    row["rows"],
                    row["length"],
                    f"{row['forward_ms']:.2f}",
                    tokens_text(row["forward_tokens_per_s"]),
                    f"{row['forward_mfu']:.1%}",
                    f"{row['host_to_host_ms']:.2f}",
                    tokens_text(row["host_to_host_tokens_per_s"]),
                    f"{row['host_to_host_mfu']:.1%}",
                    *(
                        (f"{row['tokens_per_forward']:.0f}", f"{row['cpu_ms_per_forward']:.2f}")
                        if packed
                        else ()
                    ),
                )
                for row in in_process["throughput"]
            ),
        ),
    ]


def _budgets(in_process: dict[str, Any]) -> list[str]:
    if not in_process.get("budgets"):
        return []
    return [
        "",
        "Token budget per forward (`tokens_per_forward`), the shipped variant host to host:",
        "",
        *markdown_table(
            (
                "shape",
                "budget",
                "rows x tokens",
                "forwards",
                "host-to-host tokens/s",
                "CPU ms per forward",
                "peak GPU MiB",
            ),
            (
                (
                    row["shape"],
                    row["budget"],
                    f"{row['rows']} x {row['length']}",
                    row["forwards"],
                    tokens_text(row["host_to_host_tokens_per_s"]),
                    f"{row['cpu_ms_per_forward']:.2f}",
                    "n/a" if row["peak_mib"] is None else f"{row['peak_mib']:.0f}",
                )
                for row in in_process["budgets"]
            ),
        ),
    ]


def _padding(in_process: dict[str, Any]) -> list[str]:
    if not in_process.get("padding"):
        return []
    return [
        "",
        "Padding: 1024 rows of real lengths drawn uniformly from 8 to 512 tokens (seeded), "
        "groups of 64, host to host, useful (unpadded) tokens/s:",
        "",
        *markdown_table(
            ("shape", "way", "ms", "useful tokens/s"),
            (
                (
                    row["shape"],
                    row["way"],
                    f"{row['ms']:.1f}",
                    tokens_text(row["useful_tokens_per_s"]),
                )
                for row in in_process["padding"]
            ),
        ),
    ]


def in_process_lines(in_process: dict[str, Any] | None) -> list[str]:
    if in_process is None:
        return ["Not measured in these runs."]
    lines = []
    if "matmul_tflops" in in_process:
        lines += [
            f"Float16 matrix product (8192 cubed) on this GPU: "
            f"{in_process['matmul_tflops']:.0f} TFLOP/s; MFU here and above is against the "
            f"data-sheet dense float16 peak, {in_process['dense_fp16_peak_tflops']:.0f} TFLOP/s.",
            "",
        ]
    if "throughput" in in_process:
        return lines + _legacy_throughput(in_process) + _padding(in_process)
    return [
        *lines,
        "Each variant of the packed encoder beside the shipped one (`graphs`). Forward: the "
        "first forward's packed rows from the host, copy included, on the GPU clock (the host's "
        "on CPU). Host to host: all rows through embed_packed as the embedder runs them, in "
        "forwards of the shipped token budget, with the host thread's CPU ms per forward. "
        "Warm-up: the first call after the variant was set up (compiling, or the compile cache "
        "an earlier variant filled); capture: recording its CUDA graphs.",
        "",
        *_variant_rows(in_process),
        "",
        *_throughput_rows(in_process),
        *_budgets(in_process),
        *_padding(in_process),
        "",
        "### Where each forward's time goes",
        *_profiles(in_process),
    ]
