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
from pathlib import Path

import orjson

from embedding_client.client import EmbeddingClient
from embedding_client.errors import EmbeddingError
from embedding_client.files import InputFileError, read_inputs
from embedding_client.transport import DEFAULT_URLS, PROTOCOLS


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rerank",
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join((__doc__ or "").splitlines()[1:]),
    )
    parser.add_argument("documents", nargs="*", help="documents to rank")
    parser.add_argument("--query", required=True, help="what the documents are ranked for")
    parser.add_argument("--model", required=True, help="the server's reranker (Triton name)")
    parser.add_argument("--top-n", type=int, help="keep the best n (default: all)")
    parser.add_argument("--file", type=Path, help="a text file (one per line) or .jsonl file")
    parser.add_argument("--field", default="text", help="the text field of JSONL objects")
    parser.add_argument("--url", help="host:port; 127.0.0.1:8001 (gRPC) or :8000 (HTTP)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="grpc")
    parser.add_argument(
        "--no-truncate",
        dest="truncate",
        action="store_const",
        const=False,
        help="refuse pairs longer than the model's max length instead of cutting them",
    )
    parser.add_argument("--priority", type=int, default=0, help="Triton priority level")
    return parser


def main(argv: list[str] | None = None) -> int:
    command = parser()
    args = command.parse_args(argv)
    try:
        documents = read_inputs(args.documents, args.file, args.field, "documents")
    except (InputFileError, OSError, UnicodeDecodeError) as error:
        command.error(str(error))
    url = args.url or DEFAULT_URLS[args.protocol]
    try:
        with EmbeddingClient(
            url, args.protocol, model=args.model, priority=args.priority
        ) as client:
            ranked = client.rerank(args.query, documents, top_n=args.top_n, truncate=args.truncate)
    except EmbeddingError as error:
        print(f"rerank: error: {error}", file=sys.stderr)
        return 1
    for each in ranked:
        line = {"index": each.index, "score": each.relevance_score, "text": documents[each.index]}
        sys.stdout.buffer.write(orjson.dumps(line) + b"\n")
    return 0
