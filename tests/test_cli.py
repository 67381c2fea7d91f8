"""The `embed` console script, run as installed, against a real server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest
from embedding_client import EmbeddingClient
from embedding_client.commands import EMBED as EMBED_COMMAND
from embedding_client.commands import embed_options
from embedding_requests import LONG_TEXT

from harness.server import RunningServer
from server.paths import TOKENIZER_JSON

EMBED = Path(sys.executable).parent / "embed"
parser = EMBED_COMMAND.parser
TOKENIZER = TOKENIZER_JSON
TIMEOUT_S = 120
ATOL = 1e-6
# The model configurations' bulk priority level, as for embedding files.
BULK = 2
LINES = [f"Line {index}: the command line embeds a file." for index in range(100)]


def run_embed(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(EMBED), *args], input=stdin, capture_output=True, timeout=TIMEOUT_S, check=False
    )


@pytest.fixture(scope="module")
def library(triton_server: RunningServer) -> Iterator[EmbeddingClient]:
    with EmbeddingClient(triton_server.grpc_url, priority=BULK) as client:
        yield client


def test_text_file_to_npy(
    triton_server: RunningServer, library: EmbeddingClient, tmp_path: Path
) -> None:
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    output = tmp_path / "vectors.npy"
    # Chunks of 40 rows: the .npy header goes out before the first one.
    done = run_embed(
        f"--url={triton_server.grpc_url}",
        f"--priority={BULK}",
        f"--file={source}",
        f"--output={output}",
        "--chunk-size=40",
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"embed: 100 texts in" in done.stderr and b"texts/s" in done.stderr
    vectors = np.load(output)
    assert vectors.shape == (100, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, library.embed(LINES), atol=ATOL)


def test_jsonl_file_to_jsonl_int8(
    triton_server: RunningServer, library: EmbeddingClient, tmp_path: Path
) -> None:
    source = tmp_path / "docs.jsonl"
    source.write_bytes(b"".join(orjson.dumps({"body": line}) + b"\n" for line in LINES[:10]))
    output = tmp_path / "vectors.jsonl"
    done = run_embed(
        f"--url={triton_server.grpc_url}",
        f"--priority={BULK}",
        f"--file={source}",
        "--field=body",
        "--dtype=int8",
        "--dimensions=64",
        f"--output={output}",
    )
    assert done.returncode == 0, done.stderr.decode()
    rows = [orjson.loads(line) for line in output.read_bytes().splitlines()]
    assert [row["index"] for row in rows] == list(range(10))
    codes = np.array([row["embedding"] for row in rows])
    expected = library.embed(LINES[:10], dtype="int8", dimensions=64)
    # Codes are rounded floats: a value on a rounding edge may land one apart.
    assert np.abs(codes - expected).max() <= 1


def test_stdin_to_raw_bytes_over_http(
    triton_server: RunningServer, library: EmbeddingClient
) -> None:
    stdin = "\n".join(LINES[:5]).encode()
    done = run_embed(
        "--url", triton_server.http_url, "--protocol", "http", "--format", "raw", stdin=stdin
    )
    assert done.returncode == 0, done.stderr.decode()
    vectors = np.frombuffer(done.stdout, "<f4").reshape(5, 384)
    np.testing.assert_allclose(vectors, library.embed(LINES[:5]), atol=ATOL)


def test_arguments_tokenized_locally_to_jsonl_on_stdout(
    triton_server: RunningServer, library: EmbeddingClient
) -> None:
    done = run_embed(
        "--url", triton_server.grpc_url, "--tokenizer", str(TOKENIZER), LINES[0], LINES[1]
    )
    assert done.returncode == 0, done.stderr.decode()
    vectors = [orjson.loads(line)["embedding"] for line in done.stdout.splitlines()]
    np.testing.assert_allclose(vectors, library.embed(LINES[:2]), atol=ATOL)


def test_server_rejection_exits_1_with_its_message(triton_server: RunningServer) -> None:
    done = run_embed("--url", triton_server.grpc_url, "--dimensions", "999", "text")
    assert done.returncode == 1
    assert b"invalid_parameter 'dimensions': 999 is outside 1..384" in done.stderr


def test_text_options_and_model_become_client_arguments() -> None:
    args = parser().parse_args(
        [
            "--model=e5-small",
            "--prompt-name=query",
            "--no-truncate",
            "--truncation-direction=left",
            "--dtype=int8",
            "text",
        ]
    )
    assert args.model == "e5-small"
    assert embed_options(args) == {
        "dtype": "int8",
        "dimensions": None,
        "normalize": True,
        "prompt_name": "query",
        "input_type": None,
        "truncate": False,
        "truncation_direction": "left",
    }
    # Unset, each is the server's (and the model's) default.
    defaults = parser().parse_args(["text"])
    assert defaults.model == "embed"
    assert embed_options(defaults)["truncate"] is None
    assert embed_options(parser().parse_args(["--input-type=document", "t"]))["input_type"] == (
        "document"
    )


def test_text_options_reach_the_server(
    triton_server: RunningServer, library: EmbeddingClient
) -> None:
    texts = [LONG_TEXT, LINES[0]]
    done = run_embed(
        "--url",
        triton_server.grpc_url,
        "--model=embed",
        "--input-type=query",
        "--truncation-direction=left",
        *texts,
    )
    assert done.returncode == 0, done.stderr.decode()
    vectors = [orjson.loads(line)["embedding"] for line in done.stdout.splitlines()]
    expected = library.embed(texts, input_type="query", truncation_direction="left")
    np.testing.assert_allclose(vectors, expected, atol=ATOL)
    assert float(np.dot(vectors[0], library.embed([LONG_TEXT])[0])) < 0.99
    refused = run_embed("--url", triton_server.grpc_url, "--no-truncate", LONG_TEXT)
    assert refused.returncode == 1
    assert b"input_too_large: TEXT[0] has" in refused.stderr


def test_unknown_model_exits_1_naming_it(triton_server: RunningServer) -> None:
    done = run_embed("--url", triton_server.grpc_url, "--model", "not-in-triton", "text")
    assert done.returncode == 1
    assert b"unknown model: 'not-in-triton'" in done.stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--input-type=passage"], b"argument --input-type: invalid choice: 'passage'"),
        (["--truncation-direction=up"], b"argument --truncation-direction: invalid choice"),
    ],
)
def test_bad_option_values_exit_2(arguments: list[str], message: bytes) -> None:
    done = run_embed("--url", "127.0.0.1:1", *arguments, "text")
    assert done.returncode == 2
    assert message in done.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, b"No such file or directory"),
        (b'{"text": "fine"}\n{broken\n', b"docs.jsonl:2: not valid JSON"),
        (b'{"title": "no text field"}\n', b"docs.jsonl:1: expected a string or an object"),
    ],
)
def test_bad_input_file_exits_2(tmp_path: Path, content: bytes | None, message: bytes) -> None:
    source = tmp_path / "docs.jsonl"
    if content is not None:
        source.write_bytes(content)
    done = run_embed("--url", "127.0.0.1:1", "--file", str(source))
    assert done.returncode == 2
    assert message in done.stderr


@pytest.mark.parametrize(
    ("command", "arguments", "inputs"),
    [
        ("embed", [], "texts"),
        ("rerank", ["--model=reranker", "--query=q"], "documents"),
        ("embed-sparse", ["--model=encoder"], "texts"),
    ],
)
def test_every_command_refuses_no_inputs(command: str, arguments: list[str], inputs: str) -> None:
    """Nothing on standard input, no arguments, no --file: a usage error
    naming what the command takes, before any server is asked."""
    done = subprocess.run(
        [str(EMBED.parent / command), "--url=127.0.0.1:1", *arguments],
        input=b"",
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"{command}: error: no {inputs}: give them as arguments".encode() in done.stderr
