"""The plain, fused and int8 graphs side by side: each one's cosine to the
float32 reference (sentence-transformers on the original weights), its
in-process ceiling on the served workloads, and its served throughput (the
shipped repository with only the embedder's graph swapped), against an
open-source embedding server on the plain graph: Infinity (perf/infinity.py),
measured in the same run on the same texts.

    .venv/bin/python -m perf.graphs [--seconds 4] [--results DIR]

Graphs are built by export/export_onnx.py (`--graph KIND`) in the export
environment, each into its own repository root under build/graphs/KIND/;
Infinity is installed by scripts/install_infinity.sh into build/infinity/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from export.engine_choice import MIN_COSINE as FLOAT32_MIN_COSINE
from harness.priority import BULK
from harness.repository import repository_variant
from harness.server import running_server
from perf.ceiling import Ceiling, ceiling, serving_tokenizer, tokenize
from perf.infinity import (
    ENDPOINT,
    INFINITY_VERSION,
    infinity_embeddings,
    install_infinity,
    running_infinity,
    write_openai_input_data,
)
from perf.perf_analyzer import (
    ClientMeasurement,
    Measurement,
    PerfAnalyzerError,
    run_openai_perf_analyzer,
    run_perf_analyzer,
)
from perf.sweep import Target, input_data
from perf.workloads import Kind, Workload, texts, workload
from server.paths import EXPORT_PYTHON, ONNX_RUNTIME_REPOSITORIES, REPO_ROOT

GraphKind = Literal["plain", "fused", "int8"]
GRAPH_KINDS: tuple[GraphKind, ...] = ("plain", "fused", "int8")
GRAPH_ROOT = REPO_ROOT / "build" / "graphs"
EXPORT_SOURCES = tuple(
    REPO_ROOT / "export" / name
    for name in (
        "export_onnx.py",
        "model_folder.py",
        "model_families.py",
        "st_model.py",
        "served_tokenizer.py",
        "rerank_folder.py",
        "embedding_head.py",
        "rerank_head.py",
        "onnx_graph.py",
        "reference_check.py",
        "score_check.py",
        "publish.py",
        "optimize_graph.py",
    )
)
ST_REFERENCE = REPO_ROOT / "tests" / "st_reference.py"
# The served workload cells the comparison covers.
CELLS: tuple[tuple[Kind, int], ...] = (("short", 8), ("short", 32), ("long", 8), ("long", 32))
# The served cells, at the concurrency where the shipped ensemble peaked on short-8
# (perf/report.py's sweeps), sent at the bulk priority level as throughput runs are.
SERVED_CELLS: tuple[tuple[Kind, int], ...] = (("short", 8), ("long", 8))
SERVED_CONCURRENCY = 7
SERVED_WINDOW_MS = 4000
# Infinity's own best level is taken, from a range around ours.
BASELINE_CONCURRENCY = (4, 12, 4)
TARGET_SPEEDUP = 1.2
COSINE_TEXTS = 64  # of each kind
FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Graph:
    """One exported graph: <root>/onnx_cpu/embedder/1/{model.onnx,export.json}."""

    kind: GraphKind
    root: Path

    @property
    def model_dir(self) -> Path:
        return self.root / "onnx_cpu" / "embedder" / "1"

    @property
    def model_path(self) -> Path:
        return self.model_dir / "model.onnx"

    @property
    def tokenizer_path(self) -> Path:
        return self.root / "shared" / "tokenizer" / "1" / "tokenizer.json"

    @cached_property
    def export_info(self) -> dict[str, Any]:
        return json.loads((self.model_dir / "export.json").read_text())


def _is_current(graph: Graph) -> bool:
    """Built by the current export code, as that kind."""
    record = graph.model_dir / "export.json"
    if not (record.exists() and graph.model_path.exists()):
        return False
    newest_source = max(source.stat().st_mtime for source in EXPORT_SOURCES)
    return record.stat().st_mtime > newest_source and graph.export_info.get("graph") == graph.kind


def build_graphs(
    kinds: Sequence[GraphKind] = GRAPH_KINDS, root: Path = GRAPH_ROOT
) -> dict[GraphKind, Graph]:
    """Exports each kind into root/KIND, unless a current export is there; the exports run
    side by side, each in its own process of the export environment."""
    graphs = {kind: Graph(kind, root / kind) for kind in kinds}
    exports = {
        kind: subprocess.Popen(
            [
                str(EXPORT_PYTHON),
                str(REPO_ROOT / "export" / "export_onnx.py"),
                "--graph",
                kind,
                "--repository",
                str(graph.root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for kind, graph in graphs.items()
        if not _is_current(graph)
    }
    failures = {}
    for kind, export in exports.items():
        _, stderr = export.communicate()
        if export.returncode != 0:
            failures[kind] = stderr[-3000:]
    if failures:
        raise RuntimeError(f"export of the {sorted(failures)} graph(s) failed: {failures}")
    # Fresh objects: export_info is cached.
    return {kind: Graph(kind, graph.root) for kind, graph in graphs.items()}


def reference_embeddings(model_dir: str, sentences: Sequence[str]) -> FloatArray:
    """sentence-transformers on the original weights, in the export environment (torch)."""
    completed = subprocess.run(
        [str(EXPORT_PYTHON), str(ST_REFERENCE)],
        input=json.dumps({"model_dir": model_dir, "texts": list(sentences)}),
        capture_output=True,
        text=True,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{ST_REFERENCE} failed:\n{completed.stderr[-3000:]}")
    return np.asarray(json.loads(completed.stdout), dtype=np.float32)


def graph_embeddings(graph: Graph, sentences: Sequence[str], batch: int = 8) -> FloatArray:
    """The graph's embeddings, `batch` texts per run, each run padded to its longest text."""
    model = ort.InferenceSession(str(graph.model_path), providers=["CPUExecutionProvider"])
    requests = [sentences[start : start + batch] for start in range(0, len(sentences), batch)]
    batches = tokenize(serving_tokenizer(graph.tokenizer_path), requests)
    return np.concatenate(
        [
            model.run(
                ["embedding"],
                {"input_ids": tokens.input_ids, "attention_mask": tokens.attention_mask},
            )[0]
            for tokens in batches
        ]
    )


@dataclass(frozen=True)
class Cosines:
    """Cosine of a graph's embeddings to the reference, over `count` texts."""

    minimum: float
    mean: float
    count: int


def cosines(embeddings: FloatArray, reference: FloatArray) -> Cosines:
    values = np.sum(embeddings * reference, axis=1) / (
        np.linalg.norm(embeddings, axis=1) * np.linalg.norm(reference, axis=1)
    )
    return Cosines(float(values.min()), float(values.mean()), len(values))


@dataclass(frozen=True)
class GraphResult:
    """One graph: how it was made, how close it is, how fast it runs in-process."""

    graph: Graph
    cosines: Cosines  # on the workloads' prose, short and long
    check_cosine: float  # the export's self-check minimum, on its own check texts
    ceilings: dict[str, Ceiling]  # by workload name, e.g. "short-8"

    @property
    def fusions(self) -> dict[str, int]:
        return dict(self.graph.export_info.get("fusions") or {})


def compare_graphs(
    graphs: Sequence[Graph],
    workloads: Sequence[Workload],
    seconds: float,
    sentences: Sequence[str],
    reference: FloatArray,
) -> list[GraphResult]:
    """Cosines to sentence-transformers (`reference`, the embeddings of `sentences`) and
    in-process ceilings of each graph.

    The workload cells are the outer loop, so the graphs of one cell are measured back to back
    under the same machine conditions.
    """
    ceilings: dict[GraphKind, dict[str, Ceiling]] = {graph.kind: {} for graph in graphs}
    for cell in workloads:
        for graph in graphs:
            ceilings[graph.kind][cell.name] = ceiling(
                graph.model_path, cell, seconds, graph.tokenizer_path
            )
    return [
        GraphResult(
            graph=graph,
            cosines=cosines(graph_embeddings(graph, sentences), reference),
            check_cosine=float(graph.export_info["min_cosine"]),
            ceilings=ceilings[graph.kind],
        )
        for graph in graphs
    ]


def serving_repository(graph: Graph, target: Path) -> Path:
    """A merged repository (harness.repository.repository_variant) whose embedder loads this
    graph; pass `[returned path]` as the server's repositories."""
    variant = repository_variant(target, {}, ONNX_RUNTIME_REPOSITORIES)
    for name in ("model.onnx", "export.json"):
        link = variant / "embedder" / "1" / name
        link.unlink()
        link.symlink_to((graph.model_dir / name).resolve())
    return variant


@dataclass(frozen=True)
class ServedGraph:
    """One graph served on one workload; `measurement` None when perf_analyzer failed."""

    kind: GraphKind
    workload: Workload
    measurement: Measurement | None
    error: str = ""


def serve_graphs(
    graphs: Sequence[Graph], workloads: Sequence[Workload], workdir: Path, results: Path
) -> list[ServedGraph]:
    """Each graph behind the shipped ensemble, one server after the other, with perf_analyzer's
    CSVs under `results` (graph_<kind>_<workload>.csv)."""
    served = []
    for graph in graphs:
        repository = serving_repository(graph, workdir / f"graph_{graph.kind}")
        with running_server(workdir / f"graph_{graph.kind}.log", [repository]) as server:
            target = Target(url=server.grpc_url, priority=BULK)
            for load in workloads:
                try:
                    (measurement,) = run_perf_analyzer(
                        target.model,
                        target.url,
                        target.protocol,
                        input_data(target, load),
                        results / f"graph_{graph.kind}_{load.name}.csv",
                        batch_size=load.texts_per_request,
                        concurrency=(SERVED_CONCURRENCY, SERVED_CONCURRENCY, 1),
                        measurement_ms=SERVED_WINDOW_MS,
                        stability_percentage=50.0,
                        max_trials=10,
                        priority=target.priority,
                    )
                except PerfAnalyzerError as error:
                    served.append(ServedGraph(graph.kind, load, None, str(error).splitlines()[-1]))
                    continue
                served.append(ServedGraph(graph.kind, load, measurement))
    return served


@dataclass(frozen=True)
class Baseline:
    """Infinity on the plain graph and the short workload: every concurrency level measured
    (none when perf_analyzer failed) and its cosine to the reference on short texts (its
    tokenizer truncates at 512 tokens, the model's config, where the model keeps 256)."""

    workload: Workload
    measurements: tuple[ClientMeasurement, ...]
    cosines: Cosines
    error: str = ""

    @property
    def best(self) -> ClientMeasurement | None:
        return max(self.measurements, key=lambda m: m.sentences_per_sec, default=None)


def measure_baseline(
    load: Workload,
    sentences: Sequence[str],
    reference: FloatArray,
    workdir: Path,
    results: Path,
) -> Baseline:
    """Installs Infinity if needed, checks its cosine to `reference` (the embeddings of the
    short `sentences`), and measures it with perf_analyzer (CSV under `results` as
    infinity_<workload>.csv)."""
    install_infinity()
    with running_infinity(workdir / "infinity.log") as url:
        similarity = cosines(infinity_embeddings(url, sentences), reference)
        try:
            measurements = run_openai_perf_analyzer(
                url,
                ENDPOINT,
                write_openai_input_data(load, workdir / f"infinity_{load.name}.json"),
                results / f"infinity_{load.name}.csv",
                texts_per_request=load.texts_per_request,
                concurrency=BASELINE_CONCURRENCY,
                measurement_ms=SERVED_WINDOW_MS,
                stability_percentage=50.0,
                max_trials=10,
            )
        except PerfAnalyzerError as error:
            return Baseline(load, (), similarity, str(error).splitlines()[-1])
    return Baseline(load, tuple(measurements), similarity)


def served_markdown(
    served: Sequence[ServedGraph], results: Sequence[GraphResult], baseline: Baseline
) -> str:
    """Served texts/s per graph and workload, against the plain graph served and the plain
    graph's in-process ceiling, with Infinity's levels; then the target, on the short
    workload: 1.2x Infinity's best, at float32 accuracy."""
    plain_ceilings = next(r.ceilings for r in results if r.graph.kind == "plain")
    plain_served = {row.workload.name: row.measurement for row in served if row.kind == "plain"}
    lines = [
        f"Served (shipped ensemble, embedder graph swapped), concurrency {SERVED_CONCURRENCY}, "
        "bulk priority; x: against the plain graph served, and against the plain graph's "
        "in-process ceiling:",
        "",
        "| graph | workload | served texts/s | p50 / p99 ms | x plain served "
        "| x plain in-process |",
        "|---|---|---|---|---|---|",
    ]
    for row in served:
        m = row.measurement
        if m is None:
            lines.append(f"| {row.kind} | {row.workload.name} | failed: {row.error} | | | |")
            continue
        plain = plain_served.get(row.workload.name)
        versus_served = f"x{m.sentences_per_sec / plain.sentences_per_sec:.2f}" if plain else ""
        roof = plain_ceilings.get(row.workload.name)
        versus_roof = f"x{m.sentences_per_sec / roof.sentences_per_s:.2f}" if roof else ""
        lines.append(
            f"| {row.kind} | {row.workload.name} | {m.sentences_per_sec:.1f} | "
            f"{m.p50_ms:.0f} / {m.p99_ms:.0f} | {versus_served} | {versus_roof} |"
        )
    short = baseline.workload
    roof = plain_ceilings[short.name].sentences_per_s
    name = f"Infinity {INFINITY_VERSION}"
    plain_short = plain_served.get(short.name)
    for level in baseline.measurements:
        rate = level.sentences_per_sec
        versus_served = f"x{rate / plain_short.sentences_per_sec:.2f}" if plain_short else ""
        lines.append(
            f"| {name}, plain graph, HTTP base64, concurrency {level.concurrency} "
            f"| {short.name} | {rate:.1f} | {level.p50_ms:.0f} / {level.p99_ms:.0f} "
            f"| {versus_served} | x{rate / roof:.2f} |"
        )
    lines += [
        "",
        f"{name} (ONNX Runtime engine, its graph optimization off, so the plain graph as "
        f"exported), min cosine {baseline.cosines.minimum:.6f} on {baseline.cosines.count} "
        "short texts.",
    ]
    best = baseline.best
    if best is None:
        lines.append(f"Infinity was not measured ({baseline.error}), so there is no target.")
        return "\n".join(lines) + "\n"
    bar = TARGET_SPEEDUP * best.sentences_per_sec
    lines += [
        "",
        f"Target on {short.name}: {TARGET_SPEEDUP:g} x {best.sentences_per_sec:.1f} "
        f"(Infinity's best, concurrency {best.concurrency}, x{best.sentences_per_sec / roof:.2f} "
        f"the plain graph's in-process ceiling) = {bar:.1f} texts/s served.",
    ]
    for result in results:
        kind = result.graph.kind
        row = next((r for r in served if r.kind == kind and r.workload == short), None)
        if row is None or row.measurement is None:
            continue
        rate = row.measurement.sentences_per_sec
        accurate = result.cosines.minimum >= FLOAT32_MIN_COSINE
        verdict = "met" if rate >= bar and accurate else "not met"
        lines.append(
            f"- {kind}: {rate:.1f} texts/s (x{rate / best.sentences_per_sec:.2f} Infinity), "
            f"min cosine {result.cosines.minimum:.4f} (float32 bar {FLOAT32_MIN_COSINE}): "
            f"{verdict}"
        )
    return "\n".join(lines) + "\n"


def render_markdown(results: Sequence[GraphResult]) -> str:
    """Two tables: the graphs and their accuracy, then in-process sentences/s per workload
    with the speed-up over the plain graph."""
    lines = [
        "| graph | fusions | quantization | min cosine, check texts | "
        "min / mean cosine, workload prose |",
        "|---|---|---|---|---|",
    ]
    for result in results:
        fusions = ", ".join(f"{op} x{count}" for op, count in result.fusions.items()) or "none"
        quantization = result.graph.export_info.get("quantization")
        quantized = (
            f"{quantization['weight_type']}, per-channel {quantization['per_channel']}"
            if quantization
            else "float32"
        )
        lines.append(
            f"| {result.graph.kind} | {fusions} | {quantized} | {result.check_cosine:.6f} | "
            f"{result.cosines.minimum:.6f} / {result.cosines.mean:.6f} "
            f"({result.cosines.count} texts) |"
        )
    names = list(results[0].ceilings)
    baseline = next((result for result in results if result.graph.kind == "plain"), None)
    lines += [
        "",
        "In-process sentences/s (tokens/s), best layout, tokenization not timed; x: against the "
        "plain graph; per CPU-second in brackets (steadier when other processes share the "
        "cores):",
        "",
        "| graph | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for result in results:
        cells = []
        for name in names:
            rate = result.ceilings[name]
            cell = f"{rate.sentences_per_s:.1f} ({rate.tokens_per_s:.0f})"
            if baseline is not None and result is not baseline:
                plain = baseline.ceilings[name].best
                cell += (
                    f", x{rate.sentences_per_s / plain.sentences_per_s:.2f} "
                    f"[x{rate.best.sentences_per_cpu_s / plain.sentences_per_cpu_s:.2f}]"
                )
            cells.append(cell)
        lines.append(f"| {result.graph.kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def graph_comparison(workdir: Path, results: Path, seconds: float) -> str:
    """Builds the graphs, compares them in-process and served; the report's markdown."""
    graphs = list(build_graphs().values())
    short = texts("short", COSINE_TEXTS)
    sentences = short + texts("long", COSINE_TEXTS)
    reference = reference_embeddings(graphs[0].export_info["model_dir"], sentences)
    cells = [workload(k, n) for k, n in CELLS]
    in_process = compare_graphs(graphs, cells, seconds, sentences, reference)
    served = serve_graphs(graphs, [workload(k, n) for k, n in SERVED_CELLS], workdir, results)
    baseline = measure_baseline(
        workload(*SERVED_CELLS[0]), short, reference[: len(short)], workdir, results
    )
    return render_markdown(in_process) + "\n" + served_markdown(served, in_process, baseline)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="timed seconds per cell")
    parser.add_argument(
        "--results", type=Path, default=GRAPH_ROOT / "results", help="folder for the CSVs"
    )
    args = parser.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="perf_graphs_") as workdir:
        print(graph_comparison(Path(workdir), args.results.resolve(), args.seconds), end="")


if __name__ == "__main__":
    main()
