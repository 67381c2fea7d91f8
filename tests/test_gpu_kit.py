"""The GPU kit (perf/gpu/, scripts/gpu_kit.sh) on CPU, so it still works the
next time a GPU is lent: packed here, unpacked into a temporary folder, and
the torch_gpu embedder served on a CPU instance from the unpacked tree (its
tritonserver, stubs, serializer and tritonclient), checked against
sentence-transformers on the same weights. The setups' options, the log
lines the run reads, MPS around a server and the report's tables of them
are checked without a GPU. The committed GPU report must be what
perf.gpu.report makes of the committed runs."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from export.engine_choice import MIN_COSINE
from harness.repository import read_config
from perf.gpu.mps import LOG_VARIABLE, PIPE_VARIABLE, MpsUnavailableError, mps_daemon
from perf.gpu.report import entry_point_table, load_runs, loading_table, render
from perf.gpu.served import TORCH_EMBEDDER, ServerSetup, loading_lines, served_tokenizer
from perf.workloads import token_counts, workload, write_token_input_data
from server.paths import EXPORT_PYTHON, REPO_ROOT, TOKENIZER_JSON

SCRIPT = REPO_ROOT / "scripts" / "gpu_kit.sh"
ARCHIVE = REPO_ROOT / "build" / "gpu_kit" / "gpu_kit.tar.xz"
H100_RESULTS = REPO_ROOT / "perf" / "results" / "h100"
# What one device call carries is 64 MiB, the project's tracked files included.
MAX_ARCHIVE_MIB = 48


@pytest.fixture(scope="module")
def packed() -> Path:
    completed = subprocess.run(
        [str(SCRIPT), "pack"], capture_output=True, text=True, timeout=900, check=False
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert re.search(r"gpu_kit\.tar\.xz: [\d.]+ MiB", completed.stdout), completed.stdout
    return ARCHIVE


def test_the_kit_holds_what_the_gpu_run_needs_and_stays_small(packed: Path) -> None:
    assert packed.stat().st_size < MAX_ARCHIVE_MIB * 2**20
    with tarfile.open(packed) as archive:
        names = {name.removeprefix("./") for name in archive.getnames()}
    stubs = "triton/pytriton/tritonserver/python_backend_stubs"
    for needed in (
        "kit.json",
        "triton/pytriton/tritonserver/bin/tritonserver",
        "triton/pytriton/tritonserver/backends/python/libtriton_python.so",
        f"{stubs}/3.12/triton_python_backend_stub",
        f"{stubs}/3.11/triton_python_backend_stub",
        "build/serializer/libtriton_embedding_serializer.so",
        "build/perf_analyzer/perf_analyzer",
        "python_packages/tritonclient/grpc/__init__.py",
        "numpy_cp312/numpy/__init__.py",
        "model_repository/shared/tokenizer/1/tokenizer.json",
        "model_repository/torch_gpu/embedder/1/model.py",
        "perf/gpu/run.py",
    ):
        assert needed in names, needed
    libraries = {
        Path(name).name for name in names if name.startswith("triton/nvidia_pytriton.libs/")
    }
    assert any(name.startswith("libtritonserver") for name in libraries)
    # Only what the server loads: not the wheel's libpython for its own proxy.
    assert not any(name.startswith("libpython") for name in libraries)


def _run_kit_on_cpu(kit: Path, out: Path, workdir: Path, arguments: list[str]) -> Any:
    """`gpu_kit.sh run OUT --device cpu ARGUMENTS` from a kit unpacked into
    `kit`, with the export environment's python (torch); its results.json,
    which must record no failed step."""
    environment = dict(os.environ, GPU_KIT_DIR=str(kit), GPU_KIT_PYTHON=str(EXPORT_PYTHON))
    completed = subprocess.run(
        [str(SCRIPT), "run", str(out), "--device", "cpu", *arguments, "--workdir", str(workdir)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["errors"] == []
    return results


def test_the_unpacked_kit_serves_the_torch_embedder_on_cpu(packed: Path, tmp_path: Path) -> None:
    """As shipped, with CUDA-graph buckets: on a CPU instance their padded
    shapes run eagerly, nothing is captured."""
    kit, out, workdir = tmp_path / "kit", tmp_path / "out", tmp_path / "work"
    results = _run_kit_on_cpu(kit, out, workdir, ["--serve", "minilm:e1:t1:r64"])
    (served,) = results["served"]
    assert served["device"] == "cpu"
    assert served["check"]["texts"] >= 9
    assert served["check"]["min_cosine"] >= MIN_COSINE, served["check"]
    assert (out / "report.md").is_file() and (out / "logs.tar.gz").is_file()
    assert served["name"] == "minilm-e1-t1-r64"
    (warm_up,) = served["loading"]["warm_up"]
    assert warm_up["device"] == "cpu" and warm_up["seconds"] >= 0
    assert served["loading"]["capture"] == []
    config = read_config(
        workdir / "served" / served["name"] / "repository" / "embedder" / "config.pbtxt"
    )
    shipped = read_config(TORCH_EMBEDDER / "config.pbtxt").parameters["cuda_graph_tokens"]
    assert shipped.string_value
    assert config.parameters["cuda_graph_tokens"] == shipped
    # Served from the unpacked tree, not from this checkout.
    log = (workdir / "served" / served["name"] / "tritonserver.log").read_text()
    python_backend = kit / "build" / "triton_backends" / "python" / "libtriton_python.so"
    assert re.search(rf"\| python +\| {re.escape(str(python_backend))} ", log), log[-3000:]
    assert python_backend.resolve().is_relative_to(kit / "triton")


def test_the_unpacked_kit_measures_the_encoder_variants_in_process_on_cpu(
    packed: Path, tmp_path: Path
) -> None:
    """The in-process part on CPU at its small scale: each variant checked
    against sentence-transformers, timed and profiled (compiling and
    capturing are GPU-only, so graphs run their padded shapes eagerly)."""
    out = tmp_path / "out"
    variants = ("compiled", "graphs", "tanh-gelu")
    arguments = ["--in-process", "--shapes", "minilm", "--variants", ",".join(variants)]
    results = _run_kit_on_cpu(tmp_path / "kit", out, tmp_path / "work", arguments)
    measured = results["in_process"]["variants"]
    assert [record["variant"] for record in measured] == list(variants)
    for record in measured:
        assert record["min_cosine"] >= MIN_COSINE, record["variant"]
        assert [row["length"] for row in record["workloads"]] == [50, 512]
        for row in record["workloads"]:
            assert row["host_to_host_tokens_per_s"] > 0
            categories = {entry["category"] for entry in row["profile"]["categories"]}
            assert {"matrix products", "attention"} <= categories
    budgets = {(row["budget"], row["length"]): row for row in results["in_process"]["budgets"]}
    # Two rows of 512 tokens: two forwards at a 512-token budget, one at 1024.
    assert budgets[512, 512]["forwards"] == 2 and budgets[1024, 512]["forwards"] == 1
    report = (out / "report.md").read_text()
    assert "#### minilm, graphs: one forward of 1024 tokens" in report
    assert "Token budget per forward" in report


@pytest.mark.parametrize(
    "spec",
    [
        "minilm",
        "bert-base:e4:t8",
        "bert-base:e4:t8:r256:medium",
        "bert base:e1:t1:r1",
        "bert-base:e4:t8:r256:short:turbo",
        "bert-base:e4:t8:r256:short:eager:mps",
    ],
)
def test_a_bad_setup_is_refused_with_its_form(spec: str) -> None:
    with pytest.raises(
        ValueError,
        match=r"SHAPE:eN:tN:rN\[:WORKLOADS\[:OPTIONS\]\]|unknown workloads"
        r"|unknown options \['turbo'\]; known: eager, tokens, mps",
    ):
        ServerSetup.parse(spec)


def test_setup_options_name_the_server_and_its_entry_points() -> None:
    setup = ServerSetup.parse("bert-base:e4:t8:r256:short,long:mps,tokens,eager")
    assert setup.workloads == ("short", "long")
    assert setup.options == ("eager", "tokens", "mps")
    assert setup.name == "bert-base-e4-t8-r256-eager-tokens-mps"
    assert setup.entry_points == ("embed", "embed_tokens")
    eager = ServerSetup.parse("minilm:e1:t1:r64::eager")
    assert (eager.workloads, eager.name) == ((), "minilm-e1-t1-r64-eager")
    assert eager.entry_points == ("embed",)
    assert ServerSetup.parse("minilm:e1:t1:r64:short:tokens").name == "minilm-e1-t1-r64-tokens"


# As Triton 2.51 writes the Python backend's log_info lines: level, date,
# time, thread, file:line, then the quoted message.
TRITON_LOG = """\
I1126 07:09:51.859536 4281 model_lifecycle.cc:472] "loading: embedder:1"
I1126 07:10:30.101010 4281 model.py:73] "embedder: CUDA graphs for (512, 1024, 32768) tokens captured in 12.3 s, 845 MiB"
I1126 07:10:30.202020 4281 model.py:73] "embedder: CUDA graphs for (512,) tokens captured in 2.0 s, 96 MiB"
I1126 07:10:41.303030 4281 model.py:83] "embedder: warm-up forward on cuda:0 in 41.2 s"
I1126 07:10:42.404040 4281 model.py:83] "embedder: warm-up forward on cuda:0 in 0.4 s"
I1126 07:10:42.505050 4281 model_lifecycle.cc:839] "successfully loaded 'embedder'"
"""


def test_the_embedders_load_lines_are_read_from_the_server_log() -> None:
    assert loading_lines(TRITON_LOG) == {
        "warm_up": [{"device": "cuda:0", "seconds": 41.2}, {"device": "cuda:0", "seconds": 0.4}],
        "capture": [
            {"buckets": [512, 1024, 32768], "seconds": 12.3, "mib": 845},
            {"buckets": [512], "seconds": 2.0, "mib": 96},
        ],
    }
    assert loading_lines('I1126 07:09:51.859536 4281 server.cc:1] "started"\n') == {
        "warm_up": [],
        "capture": [],
    }


def test_token_input_data_keeps_the_served_max_length(tmp_path: Path) -> None:
    """The served tokenizer.json truncates at the run's 512 tokens, not the
    packaged 256: the long texts reach embed_tokens whole."""
    tokenizer = json.loads(TOKENIZER_JSON.read_text())
    tokenizer["truncation"]["max_length"] = 512
    served = tmp_path / "tokenizer.json"
    served.write_text(json.dumps(tokenizer))
    load = workload("long", 8, 2)
    written = write_token_input_data(load, tmp_path / "long.json", served_tokenizer(served))
    entries = json.loads(written.read_text())["data"]
    texts = [text for request in load.requests for text in request]
    assert [sum(entry["ATTENTION_MASK"]["content"]) for entry in entries] == token_counts(
        texts, truncate=False
    )
    assert max(sum(entry["ATTENTION_MASK"]["content"]) for entry in entries) > 256
    for start in range(0, len(entries), load.texts_per_request):
        widths = {entry["INPUT_IDS"]["shape"][0] for entry in entries[start : start + 8]}
        assert len(widths) == 1, "a request's rows share its longest row's width"


def _fake_mps_control(folder: Path) -> Path:
    """A stand-in nvidia-cuda-mps-control that records its arguments, stdin
    and the pipe variable it saw."""
    record = folder / "calls.txt"
    script = folder / "nvidia-cuda-mps-control"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "args=$* pipe=${PIPE_VARIABLE} stdin=$(if [ -z "$*" ]; then cat; fi)" >> {record}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return record


def test_mps_starts_the_daemon_in_the_workdir_and_quits_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = _fake_mps_control(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(PIPE_VARIABLE, raising=False)
    monkeypatch.setenv(LOG_VARIABLE, "/elsewhere")
    with mps_daemon(tmp_path / "mps"):
        assert os.environ[PIPE_VARIABLE] == str(tmp_path / "mps" / "pipe")
        assert os.environ[LOG_VARIABLE] == str(tmp_path / "mps" / "log")
        assert (tmp_path / "mps" / "log").is_dir()
    assert PIPE_VARIABLE not in os.environ and os.environ[LOG_VARIABLE] == "/elsewhere"
    pipe = tmp_path / "mps" / "pipe"
    assert record.read_text().splitlines() == [
        f"args=-d pipe={pipe} stdin=",
        f"args= pipe={pipe} stdin=quit",
    ]


def test_mps_without_its_control_binary_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MpsUnavailableError, match="MPS is not available on this machine"):
        with mps_daemon(tmp_path / "mps"):
            pass


def _served(name: str, sweeps: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"name": name, "setup": {"shape": "bert-base"}, "sweeps": sweeps, **more}


def _sweep(workload: str, infer_per_sec: float, model: str | None = None) -> dict[str, Any]:
    measurement = {"infer_per_sec": infer_per_sec}
    sweep = {"workload": workload, "mean_tokens": 50.0, "measurements": [measurement]}
    return sweep if model is None else {**sweep, "model": model}


def test_the_report_compares_entry_points_and_shows_load_times() -> None:
    run = {
        "served": [
            # An old run's setup: no entry point (embed) and no load lines.
            _served("bert-base-e4-t8-r256", [_sweep("short-32", 1000.0)]),
            _served(
                "bert-base-e4-t8-r256-graphs",
                [
                    _sweep("short-32", 1000.0, "embed"),
                    _sweep("short-32", 1250.0, "embed_tokens"),
                    _sweep("long-8", 100.0, "embed"),
                ],
                loading=loading_lines(TRITON_LOG),
            ),
        ]
    }
    assert entry_point_table([("run4", run)])[2:] == [
        "| run4 | bert-base-e4-t8-r256-graphs | short-32 | 50K | 62K | 20% |"
    ]
    assert loading_table([("run4", run)])[-2:] == [
        "| run4 | bert-base-e4-t8-r256 | not recorded | not recorded | not recorded |",
        "| run4 | bert-base-e4-t8-r256-graphs | 41.2 / 0.4 s | 12.3 / 2 s | 845 / 96 MiB |",
    ]


def test_the_committed_gpu_report_is_made_from_the_committed_runs() -> None:
    runs = sorted(H100_RESULTS.glob("run*.json"))
    assert runs, f"no runs in {H100_RESULTS}"
    assert (H100_RESULTS / "report.md").read_text() == render(load_runs(runs))
