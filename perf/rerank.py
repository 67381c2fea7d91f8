"""Reranking throughput side by side, in one run on one machine: for a BERT-base-shape and a
MiniLM-L6-shape one-label CrossEncoder with random weights (harness/rerank_bench_models.py),
pairs/s of one query against 32 documents per request, served by our tritonserver (the catalog
entry, gRPC, EmbeddingClient.rerank; once in each OpenVINO precision this processor runs, and
the choice the catalog's auto makes named) and by Infinity (perf/rerank_infinity.py) at a small
concurrency sweep, and in-process (perf/rerank_in_process.py): CrossEncoder.predict (torch, the
export environment) and ONNX Runtime on our exported graph, the ceiling. Scores are checked
against CrossEncoder.predict on one request per model (ours within the bound its export kept
for that precision, the ceiling within 1e-4, Infinity's torch engine within 1e-3); a failed
check is reported and fails the run. Infinity's
optimum (ONNX Runtime) engine is measured too, its difference reported only: it feeds the graph
no token type ids, so it scores a slightly different function (perf/rerank_infinity.py).

    PYTHONPATH=. .venv/bin/python -m perf.rerank --output perf/results/<machine>/rerank.md

About 9 minutes on 2 cores at the defaults; the first run also builds the models
(build/rerank_bench), exports them (build/exports) and, where missing, installs Infinity
(scripts/install_infinity.sh). It starts its own servers one after the other; nothing else
should run meanwhile.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from embedding_catalog.tasks import RERANK
from embedding_client import EmbeddingClient
from model_common.openvino_setting import exported_setting
from model_common.processor import this_processor

from harness.priority import BULK
from harness.rerank_bench_models import BENCH_MODEL_NAMES, BENCH_MODELS, build_in_export_environment
from harness.server import running_server
from perf.infinity import INFINITY, INFINITY_VERSION, install_infinity
from perf.report_command import write_report
from perf.rerank_ceiling import ScorerExport
from perf.rerank_in_process import OURS_ALLOWED, InProcess, difference, in_process
from perf.rerank_infinity import (
    ENGINES,
    UNCHECKED,
    infinity_call,
    infinity_folder,
    infinity_folder_for,
    running_rerank_infinity,
)
from perf.rerank_load import (
    DOCUMENTS_PER_REQUEST,
    Call,
    RerankRequest,
    rerank_requests,
)
from perf.rerank_report import Check, ModelResult, Settings, Sweep, failed_checks, render, sweep
from server.catalog import Catalog, CatalogModel
from server.catalog_exports import engine_of, export_root
from server.engine_report import ENGINE_NAMES, engine_line, stage_record
from server.paths import EXPORTS, REPO_ROOT
from server.served_repository import prepare, write_served_repository

MODELS_DIR = REPO_ROOT / "build" / "rerank_bench"
# Infinity runs optimum's own export of the weights, and its optimum engine no token type ids
# (perf/rerank_infinity.py).
INFINITY_ALLOWED = 1e-3
SHAPES = {
    model.name: f"BERT, {model.hidden} wide, {model.layers} layers, {model.heads} heads, "
    f"intermediate {model.intermediate}, token type ids, max length 512, sigmoid"
    for model in BENCH_MODELS
}
COMMAND = "PYTHONPATH=. .venv/bin/python -m perf.rerank"
CLIENT_TIMEOUT_S = 600.0
# Served side by side for every model, whatever its export chose: what bf16 gains, and what the
# choice leaves.
OPENVINO_PRECISIONS = ("f32", "bf16")

# One configuration measured on one model: its score check and its sweep.
Measured = tuple[Check, Sweep]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="the report (markdown)")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds per point")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 2, 4], help="closed-loop client counts"
    )
    parser.add_argument(
        "--requests", type=int, default=8, help="distinct requests the clients take in turn"
    )
    parser.add_argument(
        "--model", action="append", choices=BENCH_MODEL_NAMES, help="only these (repeatable)"
    )
    parser.add_argument(
        "--infinity-engine",
        action="append",
        choices=ENGINES,
        help="Infinity engines to measure (repeatable; default: both)",
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.requests < 1 or min(args.concurrency) < 1:
        parser.error("--seconds, --requests and --concurrency must be positive")
    args.model = args.model or list(BENCH_MODEL_NAMES)
    args.infinity_engine = args.infinity_engine or list(ENGINES)
    return args


def _catalog(workdir: Path, folders: dict[str, Path]) -> Catalog:
    """The catalog of the benchmark models, exported, its auto repository written to
    workdir/served."""
    catalog_path = workdir / "models.toml"
    entries = [
        f'[[models]]\nname = "{name}"\npath = "{folder}"\n' for name, folder in folders.items()
    ]
    catalog_path.write_text("\n".join(entries))
    catalog = prepare(catalog_path, workdir / "served")
    if not isinstance(catalog, Catalog):
        raise SystemExit(catalog)
    return catalog


def _openvino_record(model: CatalogModel) -> dict[str, Any]:
    """What the scorer's export recorded of OpenVINO: its setting, and each precision's
    score difference on the check pairs and bound."""
    record = stage_record(export_root(model), RERANK.engine_stage("openvino"))
    openvino: dict[str, Any] = record.get("openvino", {})
    return openvino


def _label(engine: str, precision: str) -> str:
    return f"ours: {ENGINE_NAMES[engine]} {precision}"


def _choice(model: CatalogModel) -> str:
    """The label of what auto serves the model on."""
    engine = engine_of(model)
    if engine != "openvino":
        return _label(engine, "f32")
    if model.openvino_setting is not None:
        return _label(engine, model.openvino_setting[0])
    return _label(engine, exported_setting(_openvino_record(model)).precision)


@dataclass(frozen=True)
class Serving:
    """One way of serving every benchmark model: its repository, and each model's score
    check bound and, where its export refused it, why it is served."""

    label: str
    repository: Path
    allowed: dict[str, float]
    exempt: dict[str, str]


def _precision(catalog: Catalog, precision: str, out: Path) -> Serving:
    """Every model served on OpenVINO in `precision`, in the export's threads per stream where
    the export chose that precision, else one."""
    models, allowed, exempt = [], {}, {}
    for model in catalog.models:
        openvino = _openvino_record(model)
        setting = exported_setting(openvino)
        threads = setting.threads_per_stream if setting.precision == precision else 1
        models.append(replace(model, engine="openvino", openvino_setting=(precision, threads)))
        bound = float(openvino["max_score_difference_allowed"][precision])
        # A precision the export did not need to check (f32 once bf16 kept its bound) is held
        # to its bound here all the same.
        measured = openvino["max_score_difference"].get(precision)
        allowed[model.name] = bound
        if measured is not None and measured > bound:
            exempt[model.name] = (
                f"its export refused {precision} ({measured:.2e} over {bound:g} on its check "
                "pairs): served for comparison only"
            )
    write_served_repository(replace(catalog, models=tuple(models)), out)
    return Serving(_label("openvino", precision), out, allowed, exempt)


def servings(catalog: Catalog, workdir: Path) -> list[Serving]:
    """Each OpenVINO precision this processor runs, and the auto repository where it serves
    another engine."""
    precisions = OPENVINO_PRECISIONS if this_processor().has_bf16 else ("f32",)
    served = [_precision(catalog, each, workdir / f"served_{each}") for each in precisions]
    labels = {serving.label for serving in served}
    if any(_choice(model) not in labels for model in catalog.models):
        allowed = {model.name: OURS_ALLOWED for model in catalog.models}
        served.append(Serving(_label("onnxruntime", "f32"), workdir / "served", allowed, {}))
    return served


def _our_call(url: str, name: str) -> Call:
    # At the bulk level, as the other throughput runs send: the default (interactive) level's
    # 2 s queue deadline refuses a BERT-base request of 32 documents queued behind two others on
    # 2 cores.
    client = EmbeddingClient(url, "grpc", model=name, priority=BULK, timeout_s=CLIENT_TIMEOUT_S)

    def call(request: RerankRequest) -> list[float]:
        ranked = client.rerank(request.query, list(request.documents))
        return [each.relevance_score for each in sorted(ranked, key=lambda each: each.index)]

    return call


def measure_ours(
    serving: Serving,
    references: dict[str, InProcess],
    requests: Sequence[RerankRequest],
    args: argparse.Namespace,
    workdir: Path,
) -> dict[str, Measured]:
    """Both models in one tritonserver, each checked then swept (the other one idle)."""
    measured = {}
    log = workdir / f"tritonserver_{serving.repository.name}.log"
    with running_server(log, [serving.repository]) as server:
        for name, reference in references.items():

            def make_call(model: str = name) -> Call:
                return _our_call(server.grpc_url, model)

            got = make_call()(requests[0])
            check = Check(
                f"{serving.label} vs CrossEncoder.predict",
                difference(got, reference.reference),
                serving.allowed[name],
                serving.exempt.get(name, ""),
            )
            measured[name] = (
                check,
                sweep(serving.label, make_call, requests, args.concurrency, args.seconds),
            )
    return measured


def measure_infinity(
    folder: Path,
    reference: InProcess,
    requests: Sequence[RerankRequest],
    args: argparse.Namespace,
    log_prefix: Path,
) -> list[Measured]:
    """Infinity serving `folder`, once per engine asked for."""
    served = infinity_folder(folder, infinity_folder_for(folder.name))
    measured = []
    for engine in args.infinity_engine:
        log = log_prefix.with_name(f"{log_prefix.name}_{engine}.log")
        with running_rerank_infinity(served, engine, log) as url:
            got = infinity_call(url)(requests[0])
            check = Check(
                f"Infinity {engine} vs CrossEncoder.predict",
                difference(got, reference.reference),
                INFINITY_ALLOWED,
                UNCHECKED.get(engine, ""),
            )
            label = f"Infinity {INFINITY_VERSION}, {engine} engine, HTTP"

            def make_call(address: str = url) -> Call:
                return infinity_call(address)

            measured.append(
                (check, sweep(label, make_call, requests, args.concurrency, args.seconds))
            )
    return measured


def measure(args: argparse.Namespace, workdir: Path) -> list[ModelResult]:
    """Every configuration of every model: in-process first (its scores are the reference),
    then our server, then Infinity, one server at a time."""
    requests = rerank_requests(args.requests)
    folders = build_in_export_environment(MODELS_DIR, args.model)
    catalog = _catalog(workdir, folders)
    references = {
        name: in_process(folder, ScorerExport(EXPORTS / name), requests, args.seconds)
        for name, folder in folders.items()
    }
    ours = [
        measure_ours(serving, references, requests, args, workdir)
        for serving in servings(catalog, workdir)
    ]
    if not INFINITY.exists():
        install_infinity()
    infinity = {
        name: measure_infinity(
            folder, references[name], requests, args, workdir / f"infinity_{name}"
        )
        for name, folder in folders.items()
    }
    results = []
    for model in catalog.models:
        name, reference = model.name, references[model.name]
        checks = (
            reference.check,
            *(each[name][0] for each in ours),
            *(check for check, _ in infinity[name]),
        )
        results.append(
            ModelResult(
                name=name,
                shape=SHAPES[name],
                served_by=engine_line(model),
                query_tokens=reference.query_tokens,
                pair_tokens=reference.pair_tokens,
                served=tuple(each[name][1] for each in ours),
                choice=_choice(model),
                infinity=tuple(swept for _, swept in infinity[name]),
                predict=reference.predict,
                predict_threads=reference.predict_threads,
                ceiling=reference.ceiling,
                checks=checks,
            )
        )
    return results


def main(argv: Sequence[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(arguments)
    with tempfile.TemporaryDirectory(prefix="perf_rerank_") as work:
        results = measure(args, Path(work))
    settings = Settings(
        command=f"{COMMAND} {shlex.join(arguments)}",
        processor=this_processor().describe(),
        seconds=args.seconds,
        requests=args.requests,
        documents=DOCUMENTS_PER_REQUEST,
    )
    write_report(args.output, render(results, settings))
    failed = failed_checks(results)
    if failed:
        raise SystemExit("score checks failed:\n" + "\n".join(failed))


if __name__ == "__main__":
    main()
