"""The arguments the commands (embed, rerank, embed-sparse) share: where the
texts come from, which server (and whether to retry it), and truncation."""

from __future__ import annotations

import argparse
from pathlib import Path

from embedding_client.retry import DEFAULT_RETRY, NO_RETRIES
from embedding_client.transport import DEFAULT_URLS, PROTOCOLS


def command_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A parser whose help is the command module's docstring."""
    lines = (doc or "").splitlines()
    return argparse.ArgumentParser(
        prog=prog,
        description=lines[0] if lines else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(lines[1:]),
    )


def add_inputs(parser: argparse.ArgumentParser, name: str, help: str) -> None:
    """The texts: arguments `name`, else --file (text or JSONL), else standard input."""
    parser.add_argument(name, nargs="*", help=help)
    parser.add_argument("--file", type=Path, help="a text file (one per line) or .jsonl file")
    parser.add_argument("--field", default="text", help="the text field of JSONL objects")


def add_server(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="host:port; 127.0.0.1:8001 (gRPC) or :8000 (HTTP)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="grpc")
    parser.add_argument("--priority", type=int, default=0, help="Triton priority level")
    parser.add_argument(
        "--no-retry",
        dest="retry",
        action="store_const",
        const=NO_RETRIES,
        default=DEFAULT_RETRY,
        help="report an overloaded or unreachable server at once instead of retrying with backoff",
    )


def add_no_truncate(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--no-truncate",
        dest="truncate",
        action="store_const",
        const=False,
        help=f"refuse {what} longer than the model's max length instead of cutting them",
    )


def add_prompt_name(parser: argparse.ArgumentParser, where: str) -> None:
    parser.add_argument("--prompt-name", help=f"one of the model's prompts, put before {where}")


def server_url(args: argparse.Namespace) -> str:
    return str(args.url or DEFAULT_URLS[args.protocol])
