"""The embedder's count of its work on a real server: the real tokens it ran
and its CPU time, which the tokenizer's door turns into a time of work
(model_common.admission); the door's arithmetic is tests/test_admission.py's."""

from __future__ import annotations

from pathlib import Path

import tritonclient.grpc as grpcclient
from embedding_requests import LONG_TEXT, SAMPLE_TEXTS, embed_float32
from model_common.backlog import RAN_CPU_US, RAN_TOKENS
from tokenizers import Tokenizer

from harness.server import RunningServer
from server.paths import TOKENIZER_JSON


def _counted(folder: Path, kind: str) -> int:
    return sum(int.from_bytes(path.read_bytes(), "little") for path in folder.glob(f"{kind}.*"))


def test_the_embedder_counts_the_real_tokens_it_runs_and_its_cpu_time(
    triton_server: RunningServer,
) -> None:
    folder = triton_server.backlog_dir / "embedder"
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    embed_float32(client, ["warm"])
    tokens, cpu_us = _counted(folder, RAN_TOKENS), _counted(folder, RAN_CPU_US)
    texts = [*SAMPLE_TEXTS, LONG_TEXT]

    embed_float32(client, texts)

    # Padding is not work: the tokenizer's own ids, truncated as served.
    tokenizer = Tokenizer.from_file(str(TOKENIZER_JSON))
    expected = sum(len(encoding.ids) for encoding in tokenizer.encode_batch(texts))
    assert _counted(folder, RAN_TOKENS) - tokens == expected
    assert _counted(folder, RAN_CPU_US) > cpu_us
