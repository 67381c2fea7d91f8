"""The TensorRT repository's `embedder` (model_repository/tensorrt_gpu/
embedder: the checks in front of the engine, forwarding through BLS) served
for real on CPU: the engine model `embedder_engine` is played by the ONNX
embedder under that name, with an engine.json made as
export/export_tensorrt.py makes it. Every bad request must be refused by
`embedder` itself, and the engine's statistics prove it never saw one: the
ONNX stand-in would refuse most of them too, with the same message."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from embedding_requests import SAMPLE_TEXTS, embed_float32, embed_raw
from google.protobuf import text_format
from tokenizers import Tokenizer
from tritonclient.utils import InferenceServerException

from export.engine_choice import MIN_COSINE
from export.export_tensorrt import RECORD_LIMITS
from harness.repository import read_config, set_parameter
from harness.requests import token_inputs
from harness.server import RunningServer, running_server
from server.paths import MODEL_REPOSITORY, ONNX_MODEL_DIR, SHARED_REPOSITORY, TOKENIZER_JSON

ENGINE = "embedder_engine"
DIMS = 384
# The stand-in engine's own token limit, below the embedder's 8192, so that
# a request the embedder admits can still fail in the engine.
ENGINE_MAX_TOKENS = 4096
STATS_WAIT_S = 10.0
# What Triton puts in front of an error from a step of the ensemble.
ENSEMBLE_PREFIX = "in ensemble 'embed_tokens', "

Tokens = tuple[np.ndarray, np.ndarray]


def _link(source: str, destination: str) -> None:
    Path(destination).symlink_to(Path(source).resolve())


def _linked_model(source: Path, target: Path) -> None:
    """The model folder `source` as real folders of linked files, so files
    can be added or replaced in `target` without touching `source`."""
    shutil.copytree(
        source, target, copy_function=_link, ignore=shutil.ignore_patterns("__pycache__")
    )


def _stand_in_engine(target: Path) -> None:
    """The ONNX embedder as `embedder_engine`, with engine.json holding the
    fields export_tensorrt.py copies from the ONNX export's record."""
    _linked_model(ONNX_MODEL_DIR.parent, target)
    config_path = target / "config.pbtxt"
    config = read_config(config_path)
    set_parameter("max_tokens_per_request", str(ENGINE_MAX_TOKENS))(config)
    config_path.unlink()
    config_path.write_text(text_format.MessageToString(config))
    export = json.loads((ONNX_MODEL_DIR / "export.json").read_text())
    record = {key: export[key] for key in RECORD_LIMITS}
    (target / "1" / "engine.json").write_text(json.dumps(record))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    folder = tmp_path_factory.mktemp("tensorrt_wrapper")
    repository = folder / "repository"
    for model in SHARED_REPOSITORY.iterdir():
        _linked_model(model, repository / model.name)
    _linked_model(MODEL_REPOSITORY / "tensorrt_gpu" / "embedder", repository / "embedder")
    _stand_in_engine(repository / ENGINE)
    with running_server(folder / "tritonserver.log", [repository]) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: RunningServer) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_url)


def _tokens(texts: list[str]) -> Tokens:
    """Ids and mask as a client of embed_tokens sends them: padded to the
    request's longest row."""
    tokenizer = Tokenizer.from_file(str(TOKENIZER_JSON))
    tokenizer.enable_padding()
    encodings = tokenizer.encode_batch(texts)
    return (
        np.array([encoding.ids for encoding in encodings], dtype=np.int64),
        np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64),
    )


def _embed_tokens(
    client: grpcclient.InferenceServerClient, tokens: Tokens, **parameters: Any
) -> np.ndarray:
    inputs = token_inputs(grpcclient, *tokens)
    return client.infer("embed_tokens", inputs, parameters=parameters or None).as_numpy("EMBEDDING")


def _engine_requests(client: grpcclient.InferenceServerClient) -> int:
    """Requests the engine has run so far, whatever it answered: Triton
    counts a Python model's error response as a success."""
    (stats,) = client.get_inference_statistics(ENGINE, as_json=True)["model_stats"]
    inference = stats["inference_stats"]
    return sum(int(inference.get(key, {}).get("count", 0)) for key in ("success", "fail"))


def _wait_for_engine_requests(client: grpcclient.InferenceServerClient, expected: int) -> None:
    """Statistics are recorded as requests complete, a moment after their
    responses; waits until they read `expected`, or fails with what they read."""
    deadline = time.monotonic() + STATS_WAIT_S
    while (count := _engine_requests(client)) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count == expected, "requests the engine ran"


def test_embed_matches_sentence_transformers(
    client: grpcclient.InferenceServerClient, reference_embeddings: np.ndarray
) -> None:
    vectors = embed_float32(client, SAMPLE_TEXTS)
    cosines = np.sum(vectors * reference_embeddings, axis=1)
    assert cosines.min() >= MIN_COSINE, dict(zip(SAMPLE_TEXTS, cosines.tolist(), strict=True))


def test_embed_tokens_returns_the_engines_own_bytes(
    client: grpcclient.InferenceServerClient,
) -> None:
    tokens = _tokens(SAMPLE_TEXTS)
    rows = _embed_tokens(client, tokens)
    assert rows.shape == (len(SAMPLE_TEXTS), DIMS * 4)
    direct = client.infer(ENGINE, token_inputs(grpcclient, *tokens)).as_numpy("EMBEDDING")
    assert rows.tobytes() == direct.astype("<f4").tobytes()
    # `embed` tokenizes to the same ids and so reaches the same bytes.
    assert embed_raw(client, SAMPLE_TEXTS).tobytes() == rows.tobytes()


def _one_row(ids: list[int]) -> Tokens:
    input_ids = np.array([ids], dtype=np.int64)
    return input_ids, np.ones_like(input_ids)


@pytest.mark.parametrize(
    ("tokens", "parameters", "message"),
    [
        (
            _one_row([101, 10**9, 102]),
            {},
            "invalid_input: token ids must lie in [0, 30522), got [101, 1000000000]",
        ),
        (
            _one_row([101, -1, 102]),
            {},
            "invalid_input: token ids must lie in [0, 30522), got [-1, 102]",
        ),
        (
            _one_row([101, 2023, 102]),
            {"dimensions": 999},
            "invalid_parameter 'dimensions': 999 is outside 1..384",
        ),
        (
            _one_row([101] + [2023] * 255 + [102]),
            {},
            "input_too_large: INPUT_IDS rows have 257 tokens; this model takes at most 256",
        ),
    ],
    ids=["id-too-large", "id-negative", "bad-option", "row-too-long"],
)
def test_bad_request_is_refused_before_the_engine(
    client: grpcclient.InferenceServerClient,
    tokens: Tokens,
    parameters: dict[str, Any],
    message: str,
) -> None:
    before = _engine_requests(client)
    with pytest.raises(InferenceServerException) as refused:
        _embed_tokens(client, tokens, **parameters)
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert refused.value.message().startswith(ENSEMBLE_PREFIX + message), refused.value.message()
    # A good request after it: the engine counts that one and nothing else.
    assert _embed_tokens(client, _one_row([101, 2023, 102])).shape == (1, DIMS * 4)
    _wait_for_engine_requests(client, before + 1)


def test_an_engine_error_is_its_requests_error(client: grpcclient.InferenceServerClient) -> None:
    # Within the embedder's 8192 tokens, over the stand-in engine's 4096.
    input_ids = np.full((20, 256), 2023, dtype=np.int64)
    before = _engine_requests(client)
    with pytest.raises(InferenceServerException) as refused:
        _embed_tokens(client, (input_ids, np.ones_like(input_ids)))
    # The engine's message passes through unchanged; Triton 2.51's BLS drops
    # its code, so the client sees INTERNAL.
    assert refused.value.status() == "StatusCode.INTERNAL"
    assert refused.value.message().startswith(
        f"{ENSEMBLE_PREFIX}input_too_large: the request has 5120 tokens, "
        f"over the limit of {ENGINE_MAX_TOKENS}"
    ), refused.value.message()
    _wait_for_engine_requests(client, before + 1)


def test_good_requests_beside_bad_ones_get_their_own_answers(
    server: RunningServer, client: grpcclient.InferenceServerClient
) -> None:
    texts = [f"request {index}: {text}" for index, text in enumerate(SAMPLE_TEXTS * 3)]
    alone = [_embed_tokens(client, _tokens([text])) for text in texts]

    def call(index: int) -> np.ndarray | InferenceServerException:
        tokens = _one_row([101, 10**9, 102]) if index % 4 == 0 else _tokens([texts[index]])
        try:
            return _embed_tokens(grpcclient.InferenceServerClient(server.grpc_url), tokens)
        except InferenceServerException as error:
            return error

    with ThreadPoolExecutor(max_workers=len(texts)) as pool:
        outcomes = list(pool.map(call, range(len(texts))))
    for index, outcome in enumerate(outcomes):
        if index % 4 == 0:
            assert isinstance(outcome, InferenceServerException), index
            assert outcome.status() == "StatusCode.INVALID_ARGUMENT"
        else:
            assert not isinstance(outcome, InferenceServerException), outcome
            # Merged with others in the engine, rows may round differently.
            np.testing.assert_allclose(
                np.frombuffer(outcome.tobytes(), "<f4"),
                np.frombuffer(alone[index].tobytes(), "<f4"),
                atol=1e-5,
            )
