"""perf/sparse.py's results and their markdown: per model, texts/s of the served sparse encoder
beside the served dense model of the same encoder (so the vocabulary head's cost shows) and
beside sentence-transformers in-process, every point's latency, the check of the served rows,
and the bytes per row on the wire against TEI's JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perf.rerank_load import Point
from perf.rerank_report import Settings, Sweep
from perf.sparse_rows import VALUE_BYTES, RowCheck, WireBytes


@dataclass(frozen=True)
class ModelResult:
    name: str  # the sparse encoder's; the dense model's is in its sweep's label
    shape: str
    document_tokens: float  # per document, [CLS] and [SEP] included
    sparse: Sweep  # served
    dense: Sweep  # served
    encode_sparse: Point  # SparseEncoder.encode in-process
    encode_dense: Point  # SentenceTransformer.encode in-process
    threads: int  # torch's, in-process
    check: RowCheck
    wire: WireBytes


def failed_checks(results: Sequence[ModelResult]) -> list[str]:
    return [f"{result.name}: {result.check.line()}" for result in results if not result.check.ok]


def _ratio(numerator: float, denominator: float) -> str:
    return f"x{numerator / denominator:.2f}" if denominator > 0 else "n/a"


def _row(label: str, level: str, point: Point) -> str:
    # Point counts texts in its `pairs`: here each request's texts.
    return (
        f"| {label} | {level} | {point.pairs_per_s:.1f} | {point.requests} | "
        f"{point.percentile_ms(50):.0f} | {point.percentile_ms(99):.0f} |"
    )


def _summary(results: Sequence[ModelResult]) -> list[str]:
    header = [
        "model",
        "sparse served, best",
        "dense served, best",
        "sparse / dense",
        "SparseEncoder.encode",
        "served / it",
        "SentenceTransformer.encode",
        "sparse / dense in-process",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        sparse = result.sparse.best.pairs_per_s
        dense = result.dense.best.pairs_per_s
        encode_sparse = result.encode_sparse.pairs_per_s
        encode_dense = result.encode_dense.pairs_per_s
        cells = [
            result.name,
            f"{sparse:.1f}",
            f"{dense:.1f}",
            _ratio(sparse, dense),
            f"{encode_sparse:.1f}",
            _ratio(sparse, encode_sparse),
            f"{encode_dense:.1f}",
            _ratio(encode_sparse, encode_dense),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _model_section(result: ModelResult) -> list[str]:
    rows = [
        _row(sweep.label, f"c={point.concurrency}", point)
        for sweep in (result.sparse, result.dense)
        for point in sweep.points
    ]
    rows += [
        _row(
            f"SparseEncoder.encode, torch, {result.threads} threads",
            "in-process",
            result.encode_sparse,
        ),
        _row(
            f"SentenceTransformer.encode, torch, {result.threads} threads",
            "in-process",
            result.encode_dense,
        ),
    ]
    return [
        f"## {result.name}",
        "",
        f"{result.shape}. Documents {result.document_tokens:.1f} tokens on average ([CLS] and "
        f"[SEP] included), {result.wire.active_terms:.0f} active terms per served row on average.",
        "",
        "| configuration | load | texts/s | requests | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"- {result.check.line()}",
        "",
    ]


def _bytes_table(results: Sequence[ModelResult]) -> list[str]:
    dtypes = list(VALUE_BYTES)
    header = ["model", "active terms"]
    header += [f"ours, {dtype} values: own / as sent" for dtype in dtypes]
    header += ["TEI JSON", "TEI JSON / ours float32 as sent", "dense float32 row"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        wire = result.wire
        cells = [result.name, f"{wire.active_terms:.1f}"]
        cells += [f"{wire.own[dtype]:.0f} / {wire.sent[dtype]:.0f}" for dtype in dtypes]
        cells += [
            f"{wire.tei_json:.0f}",
            _ratio(wire.tei_json, wire.sent["float32"]),
            f"{wire.dense_float32}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(results: Sequence[ModelResult], settings: Settings) -> str:
    failed = failed_checks(results)
    lines = [
        "# Sparse (SPLADE) encoding throughput, side by side",
        "",
        f"`{settings.command}`",
        "",
        f"Processor: {settings.processor}.",
        "",
        "The models have random weights of real sizes (harness/sparse_bench_models.py): a "
        "BERT-base and a MiniLM-L6 shape with a real uncased WordPiece vocabulary (30522 tokens), "
        "so this is the throughput of those sizes, not of a real model's weights. Their MLM "
        "output bias is set so that a document has about as many active terms as a trained "
        "SPLADE model's (about 100-300). Each shape is two catalog entries of the same encoder "
        "weights: a SparseEncoder (MLM head, max pooling) and a SentenceTransformer (mean "
        "pooling), so the two differ by the vocabulary head. Each request is "
        f"{settings.documents} documents of about 100 tokens; {settings.requests} such requests, "
        "no document repeated, sent in turn.",
        "",
        "- sparse, served: the SparseEncoder entry served by tritonserver (ONNX Runtime, the "
        "encoder's default instances and threads), called by closed-loop clients (each sends its "
        "next request when the last is answered) through EmbeddingClient.embed_sparse over gRPC, "
        "at Triton's bulk priority level; float32 values.",
        "- dense, served: the SentenceTransformer entry of the same encoder from the same server "
        "(ONNX Runtime too, the embedder's default instances and threads, as the encoder's), the "
        "same texts and clients through EmbeddingClient.embed: unit-length float32 rows.",
        "- SparseEncoder.encode and SentenceTransformer.encode (unit-length rows): torch "
        "in-process, one request's texts per call, in a loop, with the server stopped.",
        "",
        f"{settings.seconds:g} s per point, after one untimed request per client; a point counts "
        "the requests in flight at its end whole. Latency is per request (the p99 of few "
        "requests is close to their maximum: see the counts). sparse / dense: the sparse "
        "encoder's texts/s over the dense model's; served / it: the served sparse best over "
        "SparseEncoder.encode.",
        "",
    ]
    if failed:
        lines += ["**Row checks FAILED:**", "", *(f"- {line}" for line in failed), ""]
    lines += ["## Summary (texts/s)", "", *_summary(results), ""]
    for result in results:
        lines += _model_section(result)
    lines += [
        "## Bytes per row on the wire",
        "",
        "Means over every request's rows. Ours: the serializer's row format (a uint32 count, "
        "uint32 indices, then the values), own: the row alone, as sent: padded with zeros to its "
        "response's widest row, as the format sends a response's rows; float16 values computed "
        "from the same rows' counts. TEI JSON: the body of our gateway's TEI `/embed_sparse` "
        'for the same requests (TEI\'s shape: per input a list of `{"index", "value"}`, each '
        "value in a float32's shortest digits, as TEI writes them) over its rows. Framing "
        "(gRPC, HTTP) is not counted. Dense float32 row: the dense model's raw row.",
        "",
        *_bytes_table(results),
        "",
    ]
    return "\n".join(lines)
