"""perf/rerank.py's results and their markdown: per model, every configuration's pairs/s and
per-request latency, the ratios of the served best to Infinity's best and to the in-process
runs, and the score checks that make the comparison one of equal work."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perf.rerank_ceiling import CeilingPoint
from perf.rerank_load import Call, Point, RerankRequest, closed_loop


@dataclass(frozen=True)
class Check:
    """The largest score difference of one configuration to CrossEncoder.predict on one
    request."""

    what: str
    difference: float
    allowed: float
    # Why a difference over `allowed` does not fail the run; "" where it does.
    exempt: str = ""

    @property
    def ok(self) -> bool:
        return self.difference <= self.allowed or bool(self.exempt)

    def line(self) -> str:
        if self.difference > self.allowed and self.exempt:
            verdict = f"over, reported only: {self.exempt}"
        else:
            verdict = "ok" if self.ok else "FAILED"
        return f"{self.what}: max |score difference| {self.difference:.2e} (allowed {self.allowed:g}): {verdict}"


@dataclass(frozen=True)
class Sweep:
    """One server at each concurrency level."""

    label: str
    points: tuple[Point, ...]

    @property
    def best(self) -> Point:
        return max(self.points, key=lambda point: point.pairs_per_s)


def sweep(
    label: str,
    make_call: Callable[[], Call],
    requests: Sequence[RerankRequest],
    levels: Sequence[int],
    seconds: float,
) -> Sweep:
    """Closed-loop clients at each level, `seconds` each."""
    return Sweep(label, tuple(closed_loop(make_call, requests, n, seconds) for n in levels))


@dataclass(frozen=True)
class ModelResult:
    name: str
    shape: str
    served_by: str  # the launcher's line: the engine, precision and score checks
    query_tokens: float  # per query, [CLS] and [SEP] included
    pair_tokens: float  # per (query, document) pair as the model sees it
    served: tuple[Sweep, ...]  # ours, one per way of serving it (each OpenVINO precision)
    choice: str  # the label of the one the catalog's auto serves
    infinity: tuple[Sweep, ...]  # one per Infinity engine
    predict: Point  # CrossEncoder.predict in-process
    predict_threads: int
    ceiling: tuple[CeilingPoint, ...]
    checks: tuple[Check, ...]

    @property
    def ours(self) -> Sweep:
        """What the catalog serves: the choice."""
        (chosen,) = (sweep for sweep in self.served if sweep.label == self.choice)
        return chosen

    @property
    def best_ceiling(self) -> CeilingPoint:
        return max(self.ceiling, key=lambda each: each.point.pairs_per_s)


@dataclass(frozen=True)
class Settings:
    command: str
    processor: str
    seconds: float
    requests: int
    documents: int


def failed_checks(results: Sequence[ModelResult]) -> list[str]:
    return [
        f"{result.name}: {check.line()}"
        for result in results
        for check in result.checks
        if not check.ok
    ]


def _ratio(ours: float, other: float) -> str:
    return f"x{ours / other:.2f}" if other > 0 else "n/a"


def _row(label: str, level: str, point: Point, ours: float) -> str:
    return (
        f"| {label} | {level} | {point.pairs_per_s:.1f} | {point.requests} | "
        f"{point.percentile_ms(50):.0f} | {point.percentile_ms(99):.0f} | "
        f"{_ratio(ours, point.pairs_per_s)} |"
    )


def _summary(results: Sequence[ModelResult]) -> list[str]:
    engines = [sweep.label for sweep in results[0].infinity]
    header = ["model", *(f"{sweep.label}, best" for sweep in results[0].served)]
    header += ["the choice", "ours (the choice), best"]
    for label in engines:
        header += [f"{label}, best", "ours / it"]
    header += ["CrossEncoder.predict", "ours / it", "ONNX Runtime in-process", "ours / it"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        ours = result.ours.best.pairs_per_s
        cells = [result.name, *(f"{sweep.best.pairs_per_s:.1f}" for sweep in result.served)]
        cells += [result.choice, f"{ours:.1f}"]
        for sweep in result.infinity:
            cells += [f"{sweep.best.pairs_per_s:.1f}", _ratio(ours, sweep.best.pairs_per_s)]
        ceiling = result.best_ceiling.point.pairs_per_s
        cells += [f"{result.predict.pairs_per_s:.1f}", _ratio(ours, result.predict.pairs_per_s)]
        cells += [f"{ceiling:.1f}", _ratio(ours, ceiling)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _model_section(result: ModelResult) -> list[str]:
    ours = result.ours.best.pairs_per_s
    rows = []
    for sweep in (*result.served, *result.infinity):
        rows += [_row(sweep.label, f"c={p.concurrency}", p, ours) for p in sweep.points]
    rows.append(
        _row(
            f"CrossEncoder.predict, torch, {result.predict_threads} threads",
            "in-process",
            result.predict,
            ours,
        )
    )
    rows += [
        _row("ONNX Runtime, our model.onnx", str(each.layout), each.point, ours)
        for each in result.ceiling
    ]
    return [
        f"## {result.name}",
        "",
        f"{result.shape}. Served as the launcher says: `{result.served_by}`. "
        f"Query {result.query_tokens:.1f} tokens, pair {result.pair_tokens:.1f} "
        "tokens on average ([CLS] and [SEP] included).",
        "",
        "| configuration | load | pairs/s | requests | p50 ms | p99 ms | ours (best) / this |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        *(f"- {check.line()}" for check in result.checks),
        "",
    ]


def render(results: Sequence[ModelResult], settings: Settings) -> str:
    failed = failed_checks(results)
    lines = [
        "# Reranking throughput, side by side",
        "",
        f"`{settings.command}`",
        "",
        f"Processor: {settings.processor}.",
        "",
        "The models have random weights (harness/rerank_bench_models.py): real rerankers' sizes "
        "and vocabulary, so this is the throughput of those sizes, not of a real model's "
        f"weights. Each request is one query against {settings.documents} documents of about 100 "
        f"tokens; {settings.requests} such requests, no document repeated, sent in turn.",
        "",
        "- ours: the catalog entry served by tritonserver, called by closed-loop clients (each "
        "sends its next request when the last is answered) through EmbeddingClient.rerank over "
        "gRPC, at Triton's bulk priority level; its scorer's default instances and threads, "
        "served once in each OpenVINO precision this processor runs, whatever its export "
        "chose, and where the export chose ONNX Runtime, once so. The choice: what the "
        "catalog's engine auto serves (the precision its export's check kept, on the engine it "
        "measured faster); the ratios are the choice's. A precision the export refused is "
        "served for comparison only: its score check says so.",
        "- Infinity: the same weights, its `/rerank` route over HTTP, the same clients. Its torch "
        "engine runs sentence-transformers' CrossEncoder; its optimum engine ONNX Runtime on "
        "optimum's plain export of the weights (graph optimization off), but feeds the graph no "
        "token type ids, so its scores are not held to the bar.",
        "- CrossEncoder.predict: in-process, one request's pairs per call, in a loop.",
        "- ONNX Runtime: our exported graph in-process, each layout for half the time, the "
        "requests tokenized before the clock starts: the ceiling.",
        "",
        f"{settings.seconds:g} s per point, after one untimed request per client; a point counts "
        "the requests in flight at its end whole. Latency is per request (the p99 of few "
        "requests is close to their maximum: see the counts). Ratios: our server's best point "
        "over each other configuration.",
        "",
    ]
    if failed:
        lines += ["**Score checks FAILED:**", "", *(f"- {line}" for line in failed), ""]
    lines += ["## Summary (pairs/s)", "", *_summary(results), ""]
    for result in results:
        lines += _model_section(result)
    return "\n".join(lines)
