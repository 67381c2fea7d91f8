"""The PyTorch embedder's packed encoder (model_repository/torch_gpu)
against the exported ONNX graph, both on CPU in float32: same texts, same
token ids, the embeddings must agree (cosine >= 0.9999) and so must the
norms.

torch exists only in .venv-export, so the PyTorch side runs there as a
subprocess (tests/torch_reference.py); ONNX Runtime runs in this process.
The served tests run the Triton model (model_repository/torch_gpu) in a real
tritonserver on a CPU instance, its stub in .venv-export (EXECUTION_ENV_PATH),
without token buckets and with buckets of its own (cuda_graph_tokens);
the shipped buckets are served by the GPU kit's CPU test
(tests/test_gpu_kit.py).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from embedding_client.batching import pad_rows
from tokenizers import Tokenizer
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from export.engine_choice import MIN_COSINE
from harness.export_environment import run_in_export_environment
from harness.repository import repository_variant
from harness.requests import token_inputs
from harness.server import running_server
from server.paths import (
    EXPORT_PYTHON,
    MODEL_REPOSITORY,
    ONNX_MODEL_DIR,
    SHARED_REPOSITORY,
    TOKENIZER_JSON,
)
from tests.embedding_requests import embed_float32

TORCH_REFERENCE = Path(__file__).resolve().parent / "torch_reference.py"
MIN_COSINE_FLOAT16 = 0.999
# The served tokenizer's max length: the smallest token budget the embedder
# accepts, below these texts' total. And one above everything.
MAX_LENGTH = 256
ONE_FORWARD = 1 << 20

TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Triton Inference Server batches requests dynamically.",
    "A",
    "Café naïve façade: résumé of the jalapeño crème brûlée.",
    "東京は日本の首都です。",
    "🎉🚀 Launch day! 😀👍🏽",
    " ".join(f"Sentence {index} is about attention and padding." for index in range(60)),
    "How do I reset my password?",
)

Tokens = tuple[np.ndarray, np.ndarray]


def _tokens(texts: tuple[str, ...]) -> Tokens:
    """Ids and mask as a request carries them: padded to the longest row."""
    encodings = Tokenizer.from_file(str(TOKENIZER_JSON)).encode_batch(list(texts))
    return pad_rows([encoding.ids for encoding in encodings])


def _torch_embed(
    tokens: Tokens, tokens_per_forward: int, device: str = "cpu"
) -> tuple[np.ndarray, np.ndarray]:
    export: dict[str, Any] = json.loads((ONNX_MODEL_DIR / "export.json").read_text())
    request = {
        "model_dir": export["model_dir"],
        "pooling": export["pooling"],
        "device": device,
        "tokens_per_forward": tokens_per_forward,
        "input_ids": tokens[0].tolist(),
        "attention_mask": tokens[1].tolist(),
    }
    result = run_in_export_environment([str(TORCH_REFERENCE)], json.dumps(request), check=False)
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    return np.array(output["embedding"], np.float32), np.array(output["norm"], np.float32)


def _onnx_embed_one_by_one(tokens: Tokens) -> tuple[np.ndarray, np.ndarray]:
    """Each row alone, cut to its own length: no padding can leak in."""
    session = ort.InferenceSession(
        str(ONNX_MODEL_DIR / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    embeddings, norms = [], []
    for input_ids, attention_mask in zip(*tokens, strict=True):
        length = max(int(np.flatnonzero(attention_mask).max()) + 1, 1)
        embedding, norm = session.run(
            ["embedding", "norm"],
            {
                "input_ids": input_ids[None, :length],
                "attention_mask": attention_mask[None, :length],
            },
        )
        embeddings.append(embedding[0])
        norms.append(norm[0])
    return np.stack(embeddings), np.stack(norms)


@pytest.fixture(scope="module")
def tokens() -> Tokens:
    if not EXPORT_PYTHON.exists():
        pytest.fail(f"{EXPORT_PYTHON} is missing; run scripts/setup.sh")
    return _tokens(TEXTS)


@pytest.mark.parametrize(
    "tokens_per_forward",
    [MAX_LENGTH, ONE_FORWARD],
    ids=["forwards-of-the-max-length", "one-forward"],
)
def test_torch_encoder_matches_onnx_on_cpu(tokens: Tokens, tokens_per_forward: int) -> None:
    torch_embedding, torch_norm = _torch_embed(tokens, tokens_per_forward)
    onnx_embedding, onnx_norm = _onnx_embed_one_by_one(tokens)
    assert torch_embedding.shape == onnx_embedding.shape
    cosines = np.sum(torch_embedding * onnx_embedding, axis=1)
    assert cosines.min() >= MIN_COSINE, dict(zip(TEXTS, cosines.tolist(), strict=True))
    np.testing.assert_allclose(np.linalg.norm(torch_embedding, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(torch_norm, onnx_norm, rtol=1e-4)


def test_a_row_without_attended_tokens_embeds_to_zero_like_onnx(tokens: Tokens) -> None:
    input_ids, attention_mask = tokens
    attention_mask = attention_mask.copy()
    attention_mask[2] = 0
    torch_embedding, torch_norm = _torch_embed((input_ids, attention_mask), MAX_LENGTH)
    assert np.isfinite(torch_embedding).all()
    assert not torch_embedding[2].any() and torch_norm[2, 0] == 0.0
    session = ort.InferenceSession(
        str(ONNX_MODEL_DIR / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    onnx_embedding, _ = session.run(
        ["embedding", "norm"], {"input_ids": input_ids, "attention_mask": attention_mask}
    )
    assert not onnx_embedding[2].any()


@pytest.mark.gpu
def test_torch_encoder_in_float16_on_cuda_matches_onnx(tokens: Tokens) -> None:
    if shutil.which("nvidia-smi") is None or not Path("/dev/nvidiactl").exists():
        pytest.skip("needs a CUDA GPU: no NVIDIA driver on this machine")
    torch_embedding, torch_norm = _torch_embed(tokens, ONE_FORWARD, device="cuda")
    onnx_embedding, onnx_norm = _onnx_embed_one_by_one(tokens)
    cosines = np.sum(torch_embedding * onnx_embedding, axis=1)
    # float16 weights and activations: a looser bound than float32's.
    assert cosines.min() >= MIN_COSINE_FLOAT16, dict(zip(TEXTS, cosines.tolist(), strict=True))
    np.testing.assert_allclose(torch_norm, onnx_norm, rtol=1e-2)


def _on_cpu_in_the_export_env(config: model_config_pb2.ModelConfig) -> None:
    """The torch_gpu embedder on one CPU instance, its stub in .venv-export
    (where torch is)."""
    (group,) = config.instance_group
    assert group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    group.kind = model_config_pb2.ModelInstanceGroup.KIND_CPU
    group.count = 1
    config.parameters["EXECUTION_ENV_PATH"].string_value = str(EXPORT_PYTHON.parent.parent)


def _eager(config: model_config_pb2.ModelConfig) -> None:
    """As _on_cpu_in_the_export_env, without token buckets: every forward
    exactly its rows' tokens."""
    _on_cpu_in_the_export_env(config)
    config.parameters["cuda_graph_tokens"].string_value = ""


def _with_token_buckets(config: model_config_pb2.ModelConfig) -> None:
    """As _on_cpu_in_the_export_env, with forwards padded to token buckets
    (CUDA graphs' shapes, run eagerly on CPU): one below these texts' total
    and one above it."""
    _on_cpu_in_the_export_env(config)
    assert "cuda_graph_tokens" in config.parameters
    config.parameters["cuda_graph_tokens"].string_value = "64,1024"


@pytest.fixture(scope="module", params=["eager", "token-buckets"])
def torch_server_grpc(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("torch_embedder")
    edit = _with_token_buckets if request.param == "token-buckets" else _eager
    repository = repository_variant(
        folder / "repository",
        {"embedder": edit},
        (SHARED_REPOSITORY, MODEL_REPOSITORY / "torch_gpu"),
    )
    with running_server(folder / "tritonserver.log", [repository]) as server:
        yield server.grpc_url


def test_served_torch_embedder_matches_onnx(torch_server_grpc: str) -> None:
    client = grpcclient.InferenceServerClient(torch_server_grpc)
    served = embed_float32(client, list(TEXTS))
    onnx_embedding, _ = _onnx_embed_one_by_one(_tokens(TEXTS))
    cosines = np.sum(served * onnx_embedding, axis=1)
    assert cosines.min() >= MIN_COSINE, dict(zip(TEXTS, cosines.tolist(), strict=True))


def test_served_torch_embedder_rejects_bad_tokens_alone(torch_server_grpc: str) -> None:
    client = grpcclient.InferenceServerClient(torch_server_grpc)
    ids = np.array([[101, 10**9, 102]], dtype=np.int64)
    inputs = token_inputs(grpcclient, ids, np.ones_like(ids))
    with pytest.raises(InferenceServerException) as rejected:
        client.infer("embed_tokens", inputs)
    assert rejected.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "invalid_input: token ids must lie in [0, 30522)" in rejected.value.message()
    # The instance is still serving.
    assert embed_float32(client, ["still here"]).shape == (1, 384)
