"""Sparse (SPLADE) encoding throughput side by side, in one run on one machine: for a BERT-base
and a MiniLM-L6 shape SparseEncoder with random weights (harness/sparse_bench_models.py), texts/s
of requests of 32 documents served by our tritonserver (EmbeddingClient.embed_sparse, gRPC) at a
small concurrency sweep, against the dense SentenceTransformer of the same encoder weights from
the same server (EmbeddingClient.embed), so the vocabulary head's cost shows, and against
SparseEncoder.encode and SentenceTransformer.encode in-process (torch, the export environment,
perf/sparse_torch.py). The served rows of one request per model are checked against
SparseEncoder.encode's (the same active terms, values within 1e-4); a failed check is reported and
fails the run. Then the bytes per row on the wire: our row format's, float32 and float16 values,
against TEI's JSON from our gateway's TEI /embed_sparse route (perf/sparse_rows.py).

    PYTHONPATH=. .venv/bin/python -m perf.sparse --output perf/results/<machine>/sparse.md

About 7 minutes on 2 cores at the defaults; the first run also builds the models
(build/sparse_bench) and exports them (build/exports), about 4 minutes more. It starts its own
server and gateway; nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from embedding_client import EmbeddingClient, SparseRow
from model_common.processor import this_processor
from tokenizers import Tokenizer

from harness.export_environment import run_in_export_environment
from harness.gateway import running_gateway
from harness.priority import BULK
from harness.server import running_server
from harness.sparse_bench_models import BENCH_MODELS, SparseBenchModel, build_in_export_environment
from perf.report_command import write_report
from perf.rerank_load import (
    DOCUMENTS_PER_REQUEST,
    Call,
    Point,
    RerankRequest,
    rerank_requests,
)
from perf.rerank_report import Settings, Sweep, sweep
from perf.sparse_report import ModelResult, failed_checks, render
from perf.sparse_rows import check_rows, wire_bytes
from server.catalog import Catalog
from server.paths import REPO_ROOT
from server.served_repository import prepare

MODELS_DIR = REPO_ROOT / "build" / "sparse_bench"
COMMAND = "PYTHONPATH=. .venv/bin/python -m perf.sparse"
# Distinct requests the clients take in turn.
REQUESTS = 8
CLIENT_TIMEOUT_S = 600.0
SHAPES = {
    model.name: f"BERT, {model.hidden} wide, {model.layers} layers, {model.heads} heads, "
    f"intermediate {model.intermediate}, max length 512, random weights, MLM output bias "
    f"{model.mlm_bias:g}; dense model: {model.dense_name}"
    for model in BENCH_MODELS
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="the report (markdown)")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds per point")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 2, 4], help="closed-loop client counts"
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or min(args.concurrency) < 1:
        parser.error("--seconds and --concurrency must be positive")
    return args


def _served_repository(workdir: Path, folders: dict[str, Path]) -> Path:
    """The catalog of the benchmark models, exported and written; the served folder. Every
    entry on ONNX Runtime, a sparse encoder's only engine, so that dense and sparse differ by
    their head and not by their engine."""
    catalog_path = workdir / "models.toml"
    entries = [
        f'[[models]]\nname = "{name}"\npath = "{folder}"\nengine = "onnxruntime"\n'
        for name, folder in folders.items()
    ]
    catalog_path.write_text("\n".join(entries))
    catalog = prepare(catalog_path, workdir / "served")
    if not isinstance(catalog, Catalog):
        raise SystemExit(catalog)
    return workdir / "served"


@dataclass(frozen=True)
class InProcess:
    reference: list[SparseRow]  # SparseEncoder.encode's rows of the first request
    encode_sparse: Point
    encode_dense: Point
    threads: int


def _point(loop: dict[str, Any]) -> Point:
    latencies = tuple(float(value) for value in loop["latencies_ms"])
    return Point(
        concurrency=1,
        pairs=int(loop["texts"]),
        requests=len(latencies),
        seconds=float(loop["seconds"]),
        latencies_ms=latencies,
    )


def in_process(
    spec: SparseBenchModel,
    folders: dict[str, Path],
    requests: Sequence[RerankRequest],
    seconds: float,
) -> InProcess:
    """perf/sparse_torch.py's answer for spec's two folders."""
    job = {
        "sparse_dir": str(folders[spec.name]),
        "dense_dir": str(folders[spec.dense_name]),
        "requests": [list(request.documents) for request in requests],
        "seconds": seconds,
    }
    done = run_in_export_environment(["-m", "perf.sparse_torch"], json.dumps(job))
    answer = json.loads(done.stdout)
    reference = [
        SparseRow(np.asarray(row["indices"], np.uint32), np.asarray(row["values"], np.float32))
        for row in answer["reference"]
    ]
    return InProcess(
        reference, _point(answer["sparse"]), _point(answer["dense"]), int(answer["threads"])
    )


def _client(url: str, name: str) -> EmbeddingClient:
    # At the bulk level, as the other throughput runs send: the default (interactive) level's
    # queue deadline refuses a BERT-base request of 32 documents queued behind others on 2 cores.
    return EmbeddingClient(url, "grpc", model=name, priority=BULK, timeout_s=CLIENT_TIMEOUT_S)


# closed_loop keeps no answer; a Call answers one number per text, here a cheap one of its row.


def _sparse_call(url: str, name: str) -> Call:
    client = _client(url, name)

    def call(request: RerankRequest) -> list[float]:
        rows = client.embed_sparse(list(request.documents))
        return [float(len(row.indices)) for row in rows]

    return call


def _dense_call(url: str, name: str) -> Call:
    client = _client(url, name)

    def call(request: RerankRequest) -> list[float]:
        rows = client.embed(list(request.documents))
        return np.linalg.norm(rows, axis=1).tolist()

    return call


def _tei_body(gateway_url: str, name: str, request: RerankRequest) -> bytes:
    """Our gateway's answer to TEI's /embed_sparse for the request's texts."""
    payload = {"model": name, "inputs": list(request.documents)}
    post = urllib.request.Request(
        f"{gateway_url}/embed_sparse",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(post, timeout=CLIENT_TIMEOUT_S) as reply:
        body: bytes = reply.read()
    return body


@dataclass(frozen=True)
class Served:
    responses: list[list[SparseRow]]  # every request's sparse rows
    sparse: Sweep
    dense: Sweep


def _serve_model(
    url: str, spec: SparseBenchModel, requests: Sequence[RerankRequest], args: argparse.Namespace
) -> Served:
    """spec's sparse rows of every request, its sparse sweep, then its dense one."""
    with _client(url, spec.name) as client:
        responses = [client.embed_sparse(list(request.documents)) for request in requests]

    def make_sparse() -> Call:
        return _sparse_call(url, spec.name)

    def make_dense() -> Call:
        return _dense_call(url, spec.dense_name)

    return Served(
        responses,
        sweep("sparse: tritonserver, gRPC", make_sparse, requests, args.concurrency, args.seconds),
        sweep(
            f"dense ({spec.dense_name}): tritonserver, gRPC",
            make_dense,
            requests,
            args.concurrency,
            args.seconds,
        ),
    )


def measure_served(
    served: Path, requests: Sequence[RerankRequest], args: argparse.Namespace, workdir: Path
) -> tuple[dict[str, Served], dict[str, list[bytes]]]:
    """Every model in one tritonserver, one shape at a time (the others idle); then the same
    requests through the gateway's TEI route: each shape's measures and TEI answers."""
    with running_server(workdir / "tritonserver.log", [served]) as server:
        url = server.grpc_url
        measured = {spec.name: _serve_model(url, spec, requests, args) for spec in BENCH_MODELS}
        gateway_args = (*(f"--sparse={spec.name}" for spec in BENCH_MODELS), f"--priority={BULK}")
        with running_gateway(url, [], workdir / "gateway.log", extra_args=gateway_args) as gateway:
            bodies = {
                spec.name: [_tei_body(gateway.url, spec.name, request) for request in requests]
                for spec in BENCH_MODELS
            }
    return measured, bodies


def _document_tokens(folder: Path, requests: Sequence[RerankRequest]) -> float:
    """Mean tokens per document as the model's own tokenizer counts them."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    documents = [document for request in requests for document in request.documents]
    return float(np.mean([len(encoding.ids) for encoding in tokenizer.encode_batch(documents)]))


def measure(args: argparse.Namespace, workdir: Path) -> list[ModelResult]:
    """Every model: in-process first (its rows are the reference), then served."""
    # rerank_requests' documents (32 distinct ones of about 100 tokens per request, from the
    # workloads' prose); their queries go unused.
    requests = rerank_requests(REQUESTS)
    names = [name for spec in BENCH_MODELS for name in (spec.name, spec.dense_name)]
    folders = build_in_export_environment(MODELS_DIR, names)
    served = _served_repository(workdir, folders)
    in_processes = {
        spec.name: in_process(spec, folders, requests, args.seconds) for spec in BENCH_MODELS
    }
    measured, bodies = measure_served(served, requests, args, workdir)
    results = []
    for spec in BENCH_MODELS:
        ours, theirs = measured[spec.name], in_processes[spec.name]
        results.append(
            ModelResult(
                name=spec.name,
                shape=SHAPES[spec.name],
                document_tokens=_document_tokens(folders[spec.name], requests),
                sparse=ours.sparse,
                dense=ours.dense,
                encode_sparse=theirs.encode_sparse,
                encode_dense=theirs.encode_dense,
                threads=theirs.threads,
                check=check_rows(ours.responses[0], theirs.reference),
                wire=wire_bytes(ours.responses, bodies[spec.name], spec.hidden),
            )
        )
    return results


def main(argv: Sequence[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(arguments)
    with tempfile.TemporaryDirectory(prefix="perf_sparse_") as work:
        results = measure(args, Path(work))
    settings = Settings(
        command=f"{COMMAND} {shlex.join(arguments)}",
        processor=this_processor().describe(),
        seconds=args.seconds,
        requests=REQUESTS,
        documents=DOCUMENTS_PER_REQUEST,
    )
    write_report(args.output, render(results, settings))
    failed = failed_checks(results)
    if failed:
        raise SystemExit("row checks failed:\n" + "\n".join(failed))


if __name__ == "__main__":
    main()
