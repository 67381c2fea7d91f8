"""embed-sparse: texts -> their sparse encoder's active vocabulary entries, from the shell.

    embed-sparse --model my-splade "what is a learned sparse vector?" "another text"
    embed-sparse --model my-splade --file texts.jsonl --field body --max-active-dims 64

Texts come from the arguments, else --file, else standard input (one per
line). Standard output gets one JSON object per text, in order: its index,
its active entries' vocabulary indices (ascending) and their values.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from embedding_client.client import EmbeddingClient
from embedding_client.errors import EmbeddingError
from embedding_client.files import InputFileError, read_inputs
from embedding_client.transport import DEFAULT_URLS, PROTOCOLS


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embed-sparse",
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join((__doc__ or "").splitlines()[1:]),
    )
    parser.add_argument("texts", nargs="*", help="texts to encode")
    parser.add_argument("--model", required=True, help="the server's sparse encoder (Triton name)")
    parser.add_argument(
        "--max-active-dims", type=int, help="keep each text's n largest entries (default: all)"
    )
    parser.add_argument("--prompt-name", help="one of the model's prompts, put before each text")
    parser.add_argument("--file", type=Path, help="a text file (one per line) or .jsonl file")
    parser.add_argument("--field", default="text", help="the text field of JSONL objects")
    parser.add_argument("--url", help="host:port; 127.0.0.1:8001 (gRPC) or :8000 (HTTP)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="grpc")
    parser.add_argument(
        "--no-truncate",
        dest="truncate",
        action="store_const",
        const=False,
        help="refuse texts longer than the model's max length instead of cutting them",
    )
    parser.add_argument("--priority", type=int, default=0, help="Triton priority level")
    return parser


def main(argv: list[str] | None = None) -> int:
    command = parser()
    args = command.parse_args(argv)
    try:
        texts = read_inputs(args.texts, args.file, args.field, "texts")
    except (InputFileError, OSError, UnicodeDecodeError) as error:
        command.error(str(error))
    url = args.url or DEFAULT_URLS[args.protocol]
    try:
        with EmbeddingClient(
            url, args.protocol, model=args.model, priority=args.priority
        ) as client:
            rows = client.embed_sparse(
                texts,
                max_active_dims=args.max_active_dims,
                prompt_name=args.prompt_name,
                truncate=args.truncate,
            )
    except EmbeddingError as error:
        print(f"embed-sparse: error: {error}", file=sys.stderr)
        return 1
    for index, row in enumerate(rows):
        line = {"index": index, "indices": row.indices.tolist(), "values": row.values.tolist()}
        sys.stdout.buffer.write(orjson.dumps(line) + b"\n")
    return 0
