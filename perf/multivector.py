"""Multi-vector (late-interaction) encoding and MaxSim reranking side by side, in one run on one
machine, for a MiniLM-L6-shape MultiVectorEncoder with random weights and PyLate's head
(harness/multivector_bench_models.py): texts/s of requests of 32 documents of about 290 tokens
served by our tritonserver (EmbeddingClient.embed_multi, gRPC, float16 and float32 rows) at a
small concurrency sweep, against MultiVectorEncoder.encode_document in-process (torch, the export
environment, perf/multivector_torch.py) and PyLate's encode where it is installed and loads the
folder (perf/multivector_pylate.py); the bytes per document on the wire of each row format
against the JSON of the same vectors, and the client's decode time of each (perf/
multivector_wire.py); then MaxSim reranking (NAME_rerank) against the MiniLM-L6 cross-encoder of
harness/rerank_bench_models.py from the same server, in pairs/s of the same requests. One
request's served vectors are checked against encode_document's and its MaxSim scores against
MultiVectorEncoder.similarity's (perf/multivector_checks.py); a failed check is reported and fails
the run.

    PYTHONPATH=. .venv/bin/python -m perf.multivector --output perf/results/<machine>/multivector.md

About 5 minutes on 2 cores at the defaults; the first run also builds the models
(build/multivector_bench, build/rerank_bench) and exports them (build/exports), a few minutes
more. `--quick` (2 requests, 3 s per point, one client) checks the command in about 2 minutes.
It starts its own server; nothing else should run meanwhile.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from embedding_client import EmbeddingClient
from model_common.processor import this_processor

from harness import rerank_bench_models
from harness.multivector_bench_models import BENCH_MODELS, build_in_export_environment
from harness.priority import BULK
from harness.server import running_server
from perf.multivector_checks import ScoreCheck, VectorCheck, check_scores, check_vectors
from perf.multivector_in_process import (
    PyLateRun,
    Reference,
    pylate_run,
    sentence_transformers_run,
)
from perf.multivector_load import long_document_requests, mean_pair_tokens, mean_tokens
from perf.multivector_report import PyLateResult, Result, failed_checks, render
from perf.multivector_wire import WIRE_DTYPES, decode_times, raw_rows, wire_bytes
from perf.report_command import write_report
from perf.rerank_load import DOCUMENTS_PER_REQUEST, Call, RerankRequest
from perf.rerank_report import Settings, Sweep, sweep
from server.catalog import Catalog
from server.paths import REPO_ROOT
from server.served_repository import prepare

(SPEC,) = BENCH_MODELS
MODELS_DIR = REPO_ROOT / "build" / "multivector_bench"
RERANK_MODELS_DIR = REPO_ROOT / "build" / "rerank_bench"
# The cross-encoder of the same backbone size.
(CROSS_ENCODER,) = (
    model for model in rerank_bench_models.BENCH_MODELS if model.name.startswith("minilm-l6")
)
# Its catalog name here: exports are kept by name (build/exports/NAME), and one on ONNX Runtime
# alone would replace perf/rerank.py's, which then exports it again.
SERVED_CROSS_ENCODER = f"{CROSS_ENCODER.name}-onnxruntime"
COMMAND = "PYTHONPATH=. .venv/bin/python -m perf.multivector"
CLIENT_TIMEOUT_S = 600.0
ENCODE_DTYPES = ("float16", "float32")
# Defaults of the full run and of --quick: seconds per point, client counts, distinct requests.
FULL = {"seconds": 10.0, "concurrency": [1, 2, 4], "requests": 6}
QUICK = {"seconds": 3.0, "concurrency": [1], "requests": 2}
SHAPE = (
    f"BERT, {SPEC.hidden} wide, {SPEC.layers} layers, {SPEC.heads} heads, intermediate "
    f"{SPEC.intermediate}, max length 512, uncased WordPiece (30522 tokens); a "
    f"{SPEC.settings.dense_out}-wide projection without bias, Normalize; queries expanded to "
    "exactly 32 mask tokens (not attended); documents cut at 512 tokens, their punctuation "
    "skipped; no prompts"
)
CROSS_ENCODER_SHAPE = (
    f"{CROSS_ENCODER.name} (BERT, {CROSS_ENCODER.hidden} wide, {CROSS_ENCODER.layers} layers, "
    f"{CROSS_ENCODER.heads} heads, intermediate {CROSS_ENCODER.intermediate}, token type ids, "
    "max length 512, sigmoid, random weights: harness/rerank_bench_models.py)"
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, required=True, help="the report (markdown)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a check of the command, not a measurement: {QUICK} unless given",
    )
    parser.add_argument(
        "--seconds", type=float, help=f"timed seconds per point ({FULL['seconds']})"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        help=f"closed-loop client counts ({FULL['concurrency']})",
    )
    parser.add_argument(
        "--requests",
        type=int,
        help=f"distinct requests the clients take in turn ({FULL['requests']})",
    )
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.seconds <= 0 or args.requests < 1 or min(args.concurrency) < 1:
        parser.error("--seconds, --requests and --concurrency must be positive")
    return args


def _served_repository(workdir: Path, folders: dict[str, Path]) -> Path:
    """The catalog of both models, exported and written; the served folder. Both on ONNX
    Runtime, a multi-vector encoder's only engine, so that they differ by method, not engine."""
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


def _client(url: str, name: str) -> EmbeddingClient:
    # At the bulk level, as the other throughput runs send: the interactive level's queue
    # deadline refuses a request of 32 long documents queued behind others on 2 cores.
    return EmbeddingClient(url, "grpc", model=name, priority=BULK, timeout_s=CLIENT_TIMEOUT_S)


# closed_loop keeps no answer; a Call answers one number per text, here a cheap one.


def _encode_call(url: str, dtype: str) -> Call:
    client = _client(url, SPEC.name)

    def call(request: RerankRequest) -> list[float]:
        vectors = client.embed_multi(list(request.documents), kind="document", dtype=dtype)
        return [float(len(each)) for each in vectors]

    return call


def _rerank_call(url: str, name: str) -> Call:
    client = _client(url, name)

    def call(request: RerankRequest) -> list[float]:
        ranked = client.rerank(request.query, list(request.documents))
        return [each.relevance_score for each in sorted(ranked, key=lambda each: each.index)]

    return call


@dataclass(frozen=True)
class Served:
    vector_check: VectorCheck
    score_check: ScoreCheck
    raw: dict[str, list[np.ndarray]]  # by dtype, each request's rows as received
    encode: tuple[Sweep, ...]
    maxsim: Sweep
    cross_encoder: Sweep


def _sweeps(
    url: str, requests: Sequence[RerankRequest], args: argparse.Namespace
) -> tuple[tuple[Sweep, ...], Sweep, Sweep]:
    """Encoding in each dtype, then MaxSim reranking, then the cross-encoder's, one at a time
    (the others idle)."""

    def run(label: str, make_call: Callable[[], Call]) -> Sweep:
        return sweep(label, make_call, requests, args.concurrency, args.seconds)

    encode = tuple(
        run(
            f"ours, {dtype} rows: tritonserver, gRPC",
            lambda dtype=dtype: _encode_call(url, dtype),
        )
        for dtype in ENCODE_DTYPES
    )
    maxsim = run(
        f"MaxSim ({SPEC.name}_rerank): tritonserver, gRPC",
        lambda: _rerank_call(url, f"{SPEC.name}_rerank"),
    )
    cross = run(
        f"cross-encoder ({SERVED_CROSS_ENCODER}): tritonserver, gRPC",
        lambda: _rerank_call(url, SERVED_CROSS_ENCODER),
    )
    return encode, maxsim, cross


def measure_served(
    served: Path,
    reference: Reference,
    requests: Sequence[RerankRequest],
    args: argparse.Namespace,
    workdir: Path,
) -> Served:
    """Both models in one tritonserver: the checks on the first request, every request's rows
    in each dtype, then the sweeps."""
    first = requests[0]
    with running_server(workdir / "tritonserver.log", [served]) as server:
        url = server.grpc_url
        with _client(url, SPEC.name) as client:
            vectors = client.embed_multi(list(first.documents), kind="document", dtype="float32")
        vector_check = check_vectors(
            "served float32 vectors vs encode_document", vectors, reference.vectors
        )
        scores = _rerank_call(url, f"{SPEC.name}_rerank")(first)
        score_check = check_scores(
            "served MaxSim scores vs MultiVectorEncoder.similarity", scores, reference.scores
        )
        raw = {
            dtype: [raw_rows(url, SPEC.name, request.documents, dtype) for request in requests]
            for dtype in WIRE_DTYPES
        }
        encode, maxsim, cross = _sweeps(url, requests, args)
    return Served(vector_check, score_check, raw, encode, maxsim, cross)


def _pylate_result(pylate: PyLateRun, reference: Reference) -> PyLateResult:
    check = (
        check_vectors("PyLate's vectors vs encode_document", pylate.vectors, reference.vectors)
        if pylate.vectors
        else None
    )
    return PyLateResult(pylate.versions, pylate.encode, check, pylate.why_not)


def measure(args: argparse.Namespace, workdir: Path) -> Result:
    """In-process first (its answers are the reference), then served; the decode timings once
    the server has stopped."""
    requests = long_document_requests(args.requests)
    folder = build_in_export_environment(MODELS_DIR)[SPEC.name]
    cross_folder = rerank_bench_models.build_in_export_environment(
        RERANK_MODELS_DIR, [CROSS_ENCODER.name]
    )[CROSS_ENCODER.name]
    served = _served_repository(workdir, {SPEC.name: folder, SERVED_CROSS_ENCODER: cross_folder})
    reference = sentence_transformers_run(folder, requests, args.seconds, workdir)
    pylate = pylate_run(folder, requests, args.seconds, workdir)
    ours = measure_served(served, reference, requests, args, workdir)
    documents = [document for request in requests for document in request.documents]
    pairs = [pair for request in requests for pair in request.pairs]
    return Result(
        name=SPEC.name,
        shape=SHAPE,
        document_tokens=mean_tokens(str(folder / "tokenizer.json"), documents),
        query_tokens=mean_tokens(
            str(folder / "tokenizer.json"), [request.query for request in requests]
        ),
        encode=ours.encode,
        encode_document=reference.encode_document,
        threads=reference.threads,
        pylate=_pylate_result(pylate, reference),
        cross_encoder=CROSS_ENCODER_SHAPE,
        pair_tokens=mean_pair_tokens(str(cross_folder / "tokenizer.json"), pairs),
        maxsim=ours.maxsim,
        cross_encoder_sweep=ours.cross_encoder,
        vector_check=ours.vector_check,
        score_check=ours.score_check,
        wire=wire_bytes(ours.raw),
        decode=decode_times({dtype: rows[0] for dtype, rows in ours.raw.items()}),
    )


def main(argv: Sequence[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(arguments)
    with tempfile.TemporaryDirectory(prefix="perf_multivector_") as work:
        result = measure(args, Path(work))
    settings = Settings(
        command=f"{COMMAND} {shlex.join(arguments)}",
        processor=this_processor().describe(),
        seconds=args.seconds,
        requests=args.requests,
        documents=DOCUMENTS_PER_REQUEST,
    )
    write_report(args.output, render(result, settings))
    failed = failed_checks(result)
    if failed:
        raise SystemExit("checks failed:\n" + "\n".join(failed))


if __name__ == "__main__":
    main()
