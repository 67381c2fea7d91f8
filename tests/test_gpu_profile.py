"""perf/gpu/profile.py, the GPU kit's table of where a forward's time
goes, run on CPU on the packaged all-MiniLM-L6-v2 through the torch_gpu
embedder's packed encoder: its matrix products and attention are found,
the times add up, and the markdown names the categories. CUDA kernel names
and overlapping kernels, without a GPU: on made-up intervals.

torch lives only in .venv-export, so the profile runs there as a
subprocess (tests/profile_reference.py), once for all the tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.export_environment import run_in_export_environment
from perf.gpu.profile import Interval, category, summarize, table_lines
from server.paths import ONNX_MODEL_DIR

TESTS = Path(__file__).resolve().parent
ROWS, LENGTH = 4, 32
# MiniLM: 6 layers of 4 linear layers (query/key/value fused, attention
# output, intermediate, output), no Dense head; the 4 rows are one forward.
LINEARS_PER_FORWARD = 6 * 4
EPSILON_MS = 1e-3


@pytest.fixture(scope="module")
def profiled() -> dict[str, Any]:
    export = json.loads((ONNX_MODEL_DIR / "export.json").read_text())
    input_ids = np.random.default_rng(0).integers(1000, 2000, (ROWS, LENGTH))
    request = {
        "model_dir": export["model_dir"],
        "pooling": "mean",
        "tokens_per_forward": 4096,
        "input_ids": input_ids.tolist(),
        "attention_mask": np.ones_like(input_ids).tolist(),
        "repeats": 3,
    }
    done = run_in_export_environment(
        [str(TESTS / "profile_reference.py")], json.dumps(request), check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _categories(table: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["category"]: row for row in table["categories"]}


def test_matrix_products_and_attention_take_the_time(profiled: dict[str, Any]) -> None:
    table = profiled["table"]
    assert table["device"] == "cpu"
    categories = _categories(table)
    matrix, attention = categories["matrix products"], categories["attention"]
    assert matrix["ms"] > 0
    assert attention["ms"] > 0 and attention["calls"] > 0
    assert matrix["share"] > categories.get("other", {"share": 0.0})["share"]
    # Each aten::linear counts once, with the addmm under it.
    assert matrix["calls"] == LINEARS_PER_FORWARD
    assert [row["ms"] for row in table["categories"]] == sorted(
        (row["ms"] for row in table["categories"]), reverse=True
    )


def test_times_add_up(profiled: dict[str, Any]) -> None:
    table = profiled["table"]
    assert 0 < table["busy_ms"] <= table["span_ms"] + EPSILON_MS
    assert table["idle_ms"] >= 0
    # Each rounded to 4 significant digits.
    rounding = 1e-3 * table["span_ms"]
    assert table["idle_ms"] == pytest.approx(table["span_ms"] - table["busy_ms"], abs=rounding)
    for row in table["categories"]:
        assert 0 <= row["share"] <= 1, row
    # On CPU each op's time counts once: the categories add up to busy.
    total = sum(row["ms"] for row in table["categories"])
    assert total == pytest.approx(table["busy_ms"], rel=0.01)
    assert 0 < len(table["top"]) <= 8
    assert all(len(row["name"]) <= 80 for row in table["top"])


def test_markdown_names_the_categories(profiled: dict[str, Any]) -> None:
    lines, table = profiled["lines"], profiled["table"]
    text = "\n".join(lines)
    assert lines[0].startswith("| where one forward's time goes (cpu) |")
    assert lines[1].startswith("|---|")
    for row in table["categories"]:
        assert f"| {row['category']} |" in text
    assert "| idle gaps" in text
    assert any(line.startswith("| top ops |") for line in lines)
    assert "`aten::linear`" in text


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>", "attention"),
        ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attention"),
        ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT", "matrix products"),
        ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64", "matrix products"),
        ("triton_per_fused_add_native_layer_norm_0", "fused reductions (Triton)"),
        ("triton_poi_fused_gelu_1", "fused pointwise (Triton)"),
        ("void at::native::vectorized_layer_norm_kernel<float>", "normalization"),
        ("Memcpy HtoD (Pinned -> Device)", "copies"),
        ("void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>", "elementwise"),
        ("aten::as_strided", "other"),
    ],
)
def test_cuda_kernel_names_fall_in_their_categories(name: str, expected: str) -> None:
    assert category(name) == expected


def test_overlapping_kernels_are_busy_once() -> None:
    # Microseconds, two runs: a GEMM, attention overlapping a fused kernel, a gap, a copy.
    run = [
        Interval("nvjet_a", 0, 10),
        Interval("flash_fwd", 12, 20),
        Interval("triton_poi_fused_gelu_0", 15, 18),
        Interval("Memcpy DtoH (Device -> Pinned)", 25, 30),
    ]
    intervals = run + [
        interval._replace(start=interval.start + 30, end=interval.end + 30) for interval in run
    ]
    table = summarize(intervals, "cuda", 2)
    assert (table["span_ms"], table["busy_ms"], table["idle_ms"]) == (0.03, 0.023, 0.007)
    categories = _categories(table)
    assert categories["matrix products"] == {
        "category": "matrix products",
        "calls": 1,
        "ms": 0.01,
        "share": pytest.approx(1 / 3, abs=1e-3),
    }
    assert sum(row["ms"] for row in table["categories"]) > table["busy_ms"]
    lines = table_lines(table)
    assert "| top kernels | category | calls per forward | ms per forward |" in lines
    assert "| `nvjet_a` | matrix products | 1 | 0.010 |" in lines
