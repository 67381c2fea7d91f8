"""Two models in one server: memory per served model, and one model flooded
while the other gets steady load.

    .venv/bin/python -m perf.catalog [--output perf/results/<machine>/catalog.md]

The catalog: the packaged MiniLM and a BERT-base-size model with random
weights (harness/bert_base_model.py), each on the engine its export picks.
Memory: PSS and RSS of each model's stub processes once both have answered
(harness/model_memory.py). Isolation: harness/isolation.py, the flood on
BERT-base, the steady load on MiniLM.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import tritonclient.grpc as grpcclient
from model_common.processor import this_processor

from harness.isolation import Isolation, isolation
from harness.load import Outcome, percentile_ms, request_texts
from harness.model_memory import Memory, model_memory, server_memory
from harness.requests import text_inputs
from harness.server import running_server
from perf.report_command import write_report
from server.catalog import Catalog, CatalogModel
from server.catalog_exports import EXPORT_PYTHON, engine_of
from server.paths import REPO_ROOT
from server.served_repository import prepare

BERT_BASE = "bert-base-random"
MINILM = "all-MiniLM-L6-v2"
WARM_REQUESTS = 20


def _catalog(workdir: Path) -> Path:
    folder = workdir / BERT_BASE
    subprocess.run(
        [str(EXPORT_PYTHON), "-m", "harness.bert_base_model", str(folder)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    path = workdir / "models.toml"
    path.write_text(
        f'[[models]]\nname = "{MINILM}"\naliases = ["embed"]\n\n'
        f'[[models]]\nname = "{BERT_BASE}"\npath = "{folder}"\n'
    )
    return path


def _warm(url: str, models: list[str]) -> None:
    """Every instance of each model answers, so its arenas are allocated."""
    client = grpcclient.InferenceServerClient(url)
    for model in models:
        for texts in request_texts(WARM_REQUESTS, 8):
            client.infer(model, text_inputs(grpcclient, texts))


def _memory_lines(server_mib: Memory, memory: dict[str, tuple[CatalogModel, Memory]]) -> list[str]:
    rows = [
        f"| {name} | {engine_of(model)} | {m.processes} | {m.pss_mib:.0f} | {m.rss_mib:.0f} |"
        for name, (model, m) in memory.items()
    ]
    return [
        "## Memory per served model",
        "",
        "Each model's tokenizer and embedder stub processes, after every instance answered "
        f"{WARM_REQUESTS} requests of 8 texts. PSS shares each page among the processes that "
        "map it, so PSS adds up to what the machine holds; RSS counts shared libraries in each "
        "process. tritonserver itself (core, backends, the C++ serializer), shared by all "
        f"models: {server_mib.pss_mib:.0f} MiB PSS, {server_mib.rss_mib:.0f} MiB RSS.",
        "",
        "| model | engine | processes | PSS MiB | RSS MiB |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]


def _isolation_lines(result: Isolation) -> list[str]:
    def row(label: str, model: str, outcomes: list[Outcome]) -> str:
        ok = sum(outcome.ok for outcome in outcomes)
        refused = len(outcomes) - ok
        return (
            f"| {label} | {model} | {len(outcomes)} | {ok / max(1, len(outcomes)):.1%} | "
            f"{refused} | {percentile_ms([o for o in outcomes if o.ok], 50):.0f} | "
            f"{percentile_ms([o for o in outcomes if o.ok], 99):.0f} |"
        )

    return [
        "## One model flooded, the other steady",
        "",
        f"Open-loop arrivals of 8-text requests: {result.steady_model} at "
        f"{result.steady_rate:.1f} requests/s (a quarter of what it answered alone), first "
        f"alone, then while {result.flood_model} gets {result.flood_rate:.1f} requests/s "
        "(three times what it answered alone). Latency of the answered requests.",
        "",
        "| phase | model | sent | answered | refused or timed out | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|---|",
        row("alone", result.steady_model, result.alone),
        row("during the flood", result.steady_model, result.during),
        row("the flood", result.flood_model, result.flood),
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=20.0, help="per isolation phase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="perf_catalog_") as work:
        workdir = Path(work)
        catalog = prepare(_catalog(workdir), workdir / "served")
        assert isinstance(catalog, Catalog), catalog
        with running_server(workdir / "tritonserver.log", [workdir / "served"]) as server:
            _warm(server.grpc_url, [MINILM, BERT_BASE])
            pid = server.tritonserver_pid
            memory = {m.name: (m, model_memory(pid, workdir / "served", m)) for m in catalog.models}
            shared = server_memory(pid)
            result = isolation(server.grpc_url, MINILM, BERT_BASE, args.seconds)
    lines = [
        "# Several models in one server",
        "",
        f"`python -m perf.catalog`; {this_processor().describe()}. {BERT_BASE} has random "
        "weights: its speed is that of random weights of that size.",
        "",
        *_memory_lines(shared, memory),
        *_isolation_lines(result),
    ]
    write_report(args.output, "\n".join(lines))


if __name__ == "__main__":
    main()
