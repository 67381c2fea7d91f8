"""perf/rerank.py's in-process runs of one model: CrossEncoder.predict in the export environment
(perf/rerank_torch.py), whose scores of the first request are the reference every other
configuration is checked against, and ONNX Runtime on our exported graph (the ceiling)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from harness.export_environment import run_in_export_environment
from perf.rerank_ceiling import CeilingPoint, ScorerExport, ceiling, feeds, scores
from perf.rerank_load import Point, RerankRequest
from perf.rerank_report import Check

# float32 on both sides, the same graph's arithmetic against torch's (tests/test_rerank.py).
OURS_ALLOWED = 1e-4


@dataclass(frozen=True)
class InProcess:
    reference: npt.NDArray[np.float32]  # CrossEncoder.predict's scores of the first request
    query_tokens: float
    pair_tokens: float
    predict: Point
    predict_threads: int
    ceiling: tuple[CeilingPoint, ...]
    check: Check  # the ceiling's scores against the reference


def difference(served: Sequence[float], reference: npt.NDArray[np.float32]) -> float:
    return float(np.abs(np.asarray(served, np.float32) - reference).max())


def predict(folder: Path, requests: Sequence[RerankRequest], seconds: float) -> dict[str, object]:
    """perf/rerank_torch.py's answer for `folder`."""
    job = {
        "model_dir": str(folder),
        "requests": [[request.query, list(request.documents)] for request in requests],
        "seconds": seconds,
    }
    done = run_in_export_environment(["-m", "perf.rerank_torch"], json.dumps(job))
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def _point(answer: dict[str, object]) -> Point:
    latencies = answer["latencies_ms"]
    assert isinstance(latencies, list)
    return Point(
        concurrency=1,
        pairs=int(str(answer["pairs"])),
        requests=len(latencies),
        seconds=float(str(answer["seconds"])),
        latencies_ms=tuple(float(value) for value in latencies),
    )


def _token_means(export: ScorerExport, requests: Sequence[RerankRequest]) -> tuple[float, float]:
    """Mean tokens per query alone and per pair, as the served pair tokenizer counts them."""
    masks = [batch["attention_mask"] for batch in feeds(export, requests)]
    pair = float(np.mean([count for mask in masks for count in mask.sum(axis=1)]))
    tokenizer = Tokenizer.from_file(str(export.tokenizer))
    query = float(np.mean([len(tokenizer.encode(request.query).ids) for request in requests]))
    return query, pair


def in_process(
    folder: Path, export: ScorerExport, requests: Sequence[RerankRequest], seconds: float
) -> InProcess:
    answer = predict(folder, requests, seconds)
    reference = np.asarray(answer["scores"], np.float32)
    query_tokens, pair_tokens = _token_means(export, requests)
    return InProcess(
        reference=reference,
        query_tokens=query_tokens,
        pair_tokens=pair_tokens,
        predict=_point(answer),
        predict_threads=int(str(answer["threads"])),
        # Both layouts in the time one configuration gets.
        ceiling=tuple(ceiling(export, requests, seconds / 2)),
        check=Check(
            "ONNX Runtime in-process vs CrossEncoder.predict",
            difference(scores(export, requests[0]).tolist(), reference),
            OURS_ALLOWED,
        ),
    )
