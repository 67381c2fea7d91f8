"""rerank: documents ranked by relevance to a query, from the shell.

    rerank --model my-reranker --query "how do I reset my password?" "doc one" "doc two"
    rerank --model my-reranker --query "..." --file docs.jsonl --field body --top-n 10

Documents come from the arguments, else --file, else standard input (one
per line). Standard output gets one JSON object per ranked document,
highest first: its index among the documents given, its score and its
text.
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
    parser = command_parser("rerank", __doc__)
    add_inputs(parser, "documents", "documents to rank")
    parser.add_argument("--query", required=True, help="what the documents are ranked for")
    parser.add_argument("--model", required=True, help="the server's reranker (Triton name)")
    parser.add_argument("--top-n", type=int, help="keep the best n (default: all)")
    add_prompt_name(parser, "the query")
    add_server(parser)
    add_no_truncate(parser, "pairs")
    return parser


def main(argv: list[str] | None = None) -> int:
    command = parser()
    args = command.parse_args(argv)
    try:
        documents = read_inputs(args.documents, args.file, args.field, "documents")
    except (InputFileError, OSError, UnicodeDecodeError) as error:
        command.error(str(error))
    url = server_url(args)
    try:
        with EmbeddingClient(
            url, args.protocol, model=args.model, priority=args.priority, retry=args.retry
        ) as client:
            ranked = client.rerank(
                args.query,
                documents,
                top_n=args.top_n,
                truncate=args.truncate,
                prompt_name=args.prompt_name,
            )
    except EmbeddingError as error:
        print(f"rerank: error: {error}", file=sys.stderr)
        return 1
    for each in ranked:
        line = {"index": each.index, "score": each.relevance_score, "text": documents[each.index]}
        sys.stdout.buffer.write(orjson.dumps(line) + b"\n")
    return 0
