"""perf/multivector.py's results and their markdown: texts/s encoding documents served (float16
and float32 rows) beside MultiVectorEncoder.encode_document and PyLate in-process, the bytes per
document on the wire and the client's decode time against JSON, MaxSim reranking beside the
cross-encoder of the same backbone size from the same server, the checks that make the
comparison one of equal work, and a few lines of what the numbers show, written from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perf.multivector_checks import ScoreCheck, VectorCheck
from perf.multivector_wire import WIRE_DTYPES, DecodeTimes, WireBytes
from perf.rerank_load import Point
from perf.rerank_report import Settings, Sweep


@dataclass(frozen=True)
class PyLateResult:
    versions: str
    encode: Point | None
    check: VectorCheck | None  # its vectors against encode_document's, reported only
    why_not: str  # "" where it ran


@dataclass(frozen=True)
class Result:
    name: str
    shape: str
    document_tokens: float  # per document, [CLS] and [SEP] included
    query_tokens: float  # per query, the same
    encode: tuple[Sweep, ...]  # served, one per dtype
    encode_document: Point  # MultiVectorEncoder.encode_document in-process
    threads: int  # torch's, in-process
    pylate: PyLateResult
    cross_encoder: str  # its name and shape
    pair_tokens: float  # per (query, document) pair as the cross-encoder reads it
    maxsim: Sweep  # served NAME_rerank
    cross_encoder_sweep: Sweep  # served
    vector_check: VectorCheck
    score_check: ScoreCheck
    wire: WireBytes
    decode: DecodeTimes

    @property
    def checks(self) -> tuple[VectorCheck | ScoreCheck, ...]:
        return (self.vector_check, self.score_check)


def failed_checks(result: Result) -> list[str]:
    return [check.line() for check in result.checks if not check.ok]


def _ratio(numerator: float, denominator: float) -> str:
    if denominator <= 0:
        return "n/a"
    ratio = numerator / denominator
    # Three significant digits or more: decode ratios run to the thousands.
    return f"x{ratio:.2f}" if ratio < 10 else f"x{ratio:.1f}" if ratio < 100 else f"x{ratio:.0f}"


def _row(label: str, level: str, point: Point) -> str:
    # Point counts texts (or pairs) in its `pairs`.
    return (
        f"| {label} | {level} | {point.pairs_per_s:.1f} | {point.requests} | "
        f"{point.percentile_ms(50):.0f} | {point.percentile_ms(99):.0f} |"
    )


def _sweep_rows(sweeps: Sequence[Sweep]) -> list[str]:
    return [_row(sweep.label, f"c={p.concurrency}", p) for sweep in sweeps for p in sweep.points]


def _pylate_line(pylate: PyLateResult) -> str:
    versions = f" ({pylate.versions})" if pylate.versions else ""
    if pylate.encode is None:
        return f"PyLate{versions} not measured: {pylate.why_not}."
    check = f" {pylate.check.line()} (reported only)." if pylate.check else ""
    return f"PyLate{versions}: `ColBERT(model_name_or_path=folder).encode(is_query=False)`.{check}"


def _encoding(result: Result) -> list[str]:
    best = max(sweep.best.pairs_per_s for sweep in result.encode)
    header = ["configuration", "load", "texts/s", "requests", "p50 ms", "p99 ms"]
    rows = _sweep_rows(result.encode)
    rows.append(
        _row(
            f"MultiVectorEncoder.encode_document, torch, {result.threads} threads",
            "in-process",
            result.encode_document,
        )
    )
    if result.pylate.encode is not None:
        rows.append(
            _row("PyLate encode(is_query=False), torch", "in-process", result.pylate.encode)
        )
    summary = [
        *(f"{sweep.label}, best: {sweep.best.pairs_per_s:.1f}" for sweep in result.encode),
        f"encode_document: {result.encode_document.pairs_per_s:.1f} "
        f"(served best / it {_ratio(best, result.encode_document.pairs_per_s)})",
    ]
    if result.pylate.encode is not None:
        pylate = result.pylate.encode.pairs_per_s
        summary.append(f"PyLate: {pylate:.1f} (served best / it {_ratio(best, pylate)})")
    return [
        "## Encoding documents (texts/s)",
        "",
        "Summary: " + "; ".join(summary) + ".",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *rows,
        "",
        f"- {result.vector_check.line()}",
        f"- {_pylate_line(result.pylate)}",
        "",
    ]


def _wire(result: Result) -> list[str]:
    wire = result.wire
    lines = [
        "## Bytes per document on the wire",
        "",
        f"Means over every request's documents: {wire.vectors:.1f} vectors of {wire.dims} "
        "dimensions per document. Ours: the serializer's row (a uint32 count, then the "
        "vectors in the dtype), own: the row alone, as sent: padded with zeros to its "
        "response's widest row, as the format sends a response's rows; read from the served "
        "answers of each dtype. JSON: the same float32 vectors as nested float lists, each "
        "value in a float32's shortest digits (orjson on the float32 arrays, as the gateway "
        "writes vectors in JSON: TEI's /embed, vLLM's /pooling); widened: the standard "
        "library's json.dumps of `.tolist()` (each value a double's digits). Framing (gRPC, "
        "HTTP, a JSON envelope) is not counted.",
        "",
        "| format | own | as sent | JSON (float32 digits) / this, as sent |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| ours, {dtype} | {wire.own[dtype]:.0f} | {wire.sent[dtype]:.0f} | "
        f"{_ratio(wire.json_float32, wire.sent[dtype])} |"
        for dtype in WIRE_DTYPES
        if dtype in wire.own
    ]
    lines += [
        f"| JSON, float32 digits | {wire.json_float32:.0f} | {wire.json_float32:.0f} | x1.00 |",
        f"| JSON, widened | {wire.json_widened:.0f} | {wire.json_widened:.0f} | "
        f"{_ratio(wire.json_float32, wire.json_widened)} |",
        "",
    ]
    return lines


def _decode(result: Result) -> list[str]:
    times = result.decode
    lines = [
        "## The client's decode time per document",
        "",
        f"One response of {times.documents} documents, turned into one numpy array per "
        "document; the median of 5 rounds, each of enough calls to last 0.2 s, over the "
        "documents. Ours: vector_dims and decode_multivector_rows on the received bytes, as "
        "the client library does (views of the bytes, no copy). JSON: json.loads (or "
        "orjson.loads) of the JSON above, then np.asarray(..., float32) per document.",
        "",
        "| decode | µs per document | this / ours float32 |",
        "|---|---|---|",
    ]
    ours = times.rows["float32"]
    lines += [
        f"| ours, {dtype} | {value:.2f} | {_ratio(value, ours)} |"
        for dtype, value in times.rows.items()
    ]
    lines += [
        f"| json.loads + numpy | {times.json_loads:.0f} | {_ratio(times.json_loads, ours)} |",
        f"| orjson.loads + numpy | {times.orjson_loads:.0f} | {_ratio(times.orjson_loads, ours)} |",
        "",
    ]
    return lines


def _rerank(result: Result, documents: int) -> list[str]:
    maxsim = result.maxsim.best.pairs_per_s
    cross = result.cross_encoder_sweep.best.pairs_per_s
    return [
        "## MaxSim reranking against a cross-encoder (pairs/s)",
        "",
        f"The same requests: one query ({result.query_tokens:.1f} tokens) against {documents} "
        f"documents. MaxSim: `{result.name}_rerank`, which encodes the query and every "
        "document on each request, then scores by MaxSim. Cross-encoder: "
        f"{result.cross_encoder}, reading each pair ({result.pair_tokens:.1f} tokens on "
        f"average). Best: MaxSim {maxsim:.1f}, the cross-encoder {cross:.1f}, MaxSim / it "
        f"{_ratio(maxsim, cross)}.",
        "",
        "| configuration | load | pairs/s | requests | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|",
        *_sweep_rows((result.maxsim, result.cross_encoder_sweep)),
        "",
        f"- {result.score_check.line()}",
        "",
    ]


def _shows(result: Result) -> list[str]:
    """What the numbers show, each line from them."""
    float16, float32 = (
        next(sweep for sweep in result.encode if dtype in sweep.label)
        for dtype in ("float16", "float32")
    )
    encode_document = result.encode_document.pairs_per_s
    wire, times = result.wire, result.decode
    pylate = (
        f"PyLate {result.pylate.encode.pairs_per_s:.1f} "
        f"({_ratio(float16.best.pairs_per_s, result.pylate.encode.pairs_per_s)})"
        if result.pylate.encode is not None
        else "PyLate not measured (below)"
    )
    maxsim = result.maxsim.best.pairs_per_s
    cross = result.cross_encoder_sweep.best.pairs_per_s
    return [
        "## What it shows",
        "",
        f"- Encoding documents of {result.document_tokens:.0f} tokens, served: "
        f"{float16.best.pairs_per_s:.1f} texts/s in float16 rows, "
        f"{float32.best.pairs_per_s:.1f} in float32 (float16 / float32 "
        f"{_ratio(float16.best.pairs_per_s, float32.best.pairs_per_s)}); in-process "
        f"encode_document {encode_document:.1f} (served float16 / it "
        f"{_ratio(float16.best.pairs_per_s, encode_document)}), {pylate}.",
        f"- A document is {wire.vectors:.0f} vectors: {wire.sent['float32']:.0f} bytes as sent "
        f"in float32, {wire.sent['float16']:.0f} in float16, {wire.sent['int8']:.0f} in int8, "
        f"{wire.sent['binary']:.0f} in binary, against {wire.json_float32:.0f} of JSON with "
        f"float32 digits (JSON / float16 {_ratio(wire.json_float32, wire.sent['float16'])}).",
        f"- The client decodes a document's float32 row in {times.rows['float32']:.2f} µs "
        f"against {times.json_loads:.0f} µs for json.loads + numpy "
        f"({_ratio(times.json_loads, times.rows['float32'])}) and {times.orjson_loads:.0f} "
        f"for orjson ({_ratio(times.orjson_loads, times.rows['float32'])}).",
        f"- MaxSim reranking serves {maxsim:.1f} pairs/s against the cross-encoder's "
        f"{cross:.1f} on the same server and engine ({_ratio(maxsim, cross)}).",
        "",
    ]


def render(result: Result, settings: Settings) -> str:
    failed = failed_checks(result)
    lines = [
        "# Multi-vector (late-interaction) encoding and MaxSim reranking, side by side",
        "",
        f"`{settings.command}`",
        "",
        f"Processor: {settings.processor}.",
        "",
        f"{result.name}: {result.shape}. The model has random weights "
        "(harness/multivector_bench_models.py), so this is the throughput of its size, not of "
        f"a real model's weights. Each request is {settings.documents} documents of "
        f"{result.document_tokens:.1f} tokens on average by the model's tokenizer ([CLS] and "
        f"[SEP] included), {settings.requests} such requests, no document repeated, sent in "
        "turn; the reranking requests add a query to each.",
        "",
        "- served: the catalog entries served by one tritonserver on ONNX Runtime (a "
        "multi-vector encoder's only engine; the cross-encoder set to it too, so the two "
        "differ by method, not engine: perf/rerank.py measures the cross-encoder on the engine "
        "its export chooses), their default instances and threads, called by closed-loop "
        "clients (each sends its next request when the last is answered) over gRPC at "
        "Triton's bulk priority level: EmbeddingClient.embed_multi (kind document) and "
        "EmbeddingClient.rerank.",
        "- in-process: MultiVectorEncoder.encode_document (torch, the export environment) and "
        "PyLate where it loads the folder, one request's documents per call, in a loop, with "
        "the server stopped.",
        "",
        f"{settings.seconds:g} s per point, after one untimed request per client; a point "
        "counts the requests in flight at its end whole. Latency is per request (the p99 of "
        "few requests is close to their maximum: see the counts).",
        "",
    ]
    if failed:
        lines += ["**Checks FAILED:**", "", *(f"- {line}" for line in failed), ""]
    lines += _shows(result)
    lines += _encoding(result)
    lines += _wire(result)
    lines += _decode(result)
    lines += _rerank(result, settings.documents)
    return "\n".join(lines)
