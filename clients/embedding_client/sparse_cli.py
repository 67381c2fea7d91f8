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

import orjson

from embedding_client.client import EmbeddingClient
from embedding_client.command_line import (
    add_inputs,
    add_no_truncate,
    add_prompt_name,
    add_server,
    command_parser,
    server_url,
)
from embedding_client.errors import EmbeddingError
from embedding_client.files import InputFileError, read_inputs


def parser() -> argparse.ArgumentParser:
    parser = command_parser("embed-sparse", __doc__)
    add_inputs(parser, "texts", "texts to encode")
    parser.add_argument("--model", required=True, help="the server's sparse encoder (Triton name)")
    parser.add_argument(
        "--max-active-dims", type=int, help="keep each text's n largest entries (default: all)"
    )
    add_prompt_name(parser, "each text")
    add_server(parser)
    add_no_truncate(parser, "texts")
    return parser


def main(argv: list[str] | None = None) -> int:
    command = parser()
    args = command.parse_args(argv)
    try:
        texts = read_inputs(args.texts, args.file, args.field, "texts")
    except (InputFileError, OSError, UnicodeDecodeError) as error:
        command.error(str(error))
    url = server_url(args)
    try:
        with EmbeddingClient(
            url, args.protocol, model=args.model, priority=args.priority, retry=args.retry
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
