"""Admission before work: the first stage of `embed` (the tokenizer) holds
new work while the embedder already has enough waiting.

Under overload the backlog forms at the slowest stage, the embedder. If the
tokenizer kept tokenizing, requests would pile up in the embedder's queue and
be refused there, after their tokenization was paid for. Held at the
tokenizer instead, new requests wait untokenized in the tokenizer's own
bounded queue, and past its bound Triton refuses them at once: a refusal
costs no tokenization and no copy between stages.

The embedder's backlog is Triton's own gauge of its queued requests
(nv_inference_pending_request_count), read from the metrics endpoint the
launcher names in EMBEDDING_METRICS_URL.
"""

from __future__ import annotations

import time
import urllib.request
from dataclasses import dataclass

METRICS_URL_VARIABLE = "EMBEDDING_METRICS_URL"
PENDING_METRIC = "nv_inference_pending_request_count"
METRICS_TIMEOUT_S = 1.0


def pending_requests(metrics_text: str, model: str) -> int:
    """The model's queued requests (all versions) in Triton's metrics text."""
    prefix = f'{PENDING_METRIC}{{model="{model}",'
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in metrics_text.splitlines()
        if line.startswith(prefix)
    )


@dataclass
class BacklogGate:
    """Waits while `model` has `limit` or more requests queued."""

    metrics_url: str
    model: str
    limit: int
    poll_s: float = 0.005

    def pending(self) -> int:
        """Raises OSError when the metrics endpoint cannot be read."""
        with urllib.request.urlopen(self.metrics_url, timeout=METRICS_TIMEOUT_S) as reply:
            return pending_requests(reply.read().decode(), self.model)

    def wait(self) -> float:
        """Returns once the backlog is under the limit; the seconds waited."""
        started = time.monotonic()
        while self.pending() >= self.limit:
            time.sleep(self.poll_s)
        return time.monotonic() - started
