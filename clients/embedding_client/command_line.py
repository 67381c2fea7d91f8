"""The flow every command (embed, rerank, embed-sparse; commands.py) runs:
its arguments parsed, its inputs read (the arguments, else --file, else
standard input) and refused where there are none, a client of the server
opened, the command's call made and its output written, and a refusal of
the call reported as `PROG: error: MESSAGE` with exit status 1. A command
declares only what differs (Command)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedding_client.client import EmbeddingClient
from embedding_client.errors import EmbeddingError
from embedding_client.files import InputFileError, read_inputs
from embedding_client.retry import DEFAULT_RETRY, NO_RETRIES
from embedding_client.transport import DEFAULT_URLS, PROTOCOLS


def _no_options(args: argparse.Namespace) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Command:
    """What one command adds to the flow."""

    prog: str
    # Its help: the first line, then the rest as the epilog.
    doc: str
    # What its inputs are, in its usage and its messages ("texts"), and their help.
    inputs: str
    inputs_help: str
    # Its own options, --model among them (add_model and add_text_options
    # declare those the commands share).
    arguments: Callable[[argparse.ArgumentParser], None]
    # Its call with the parsed arguments and the inputs, its output written.
    run: Callable[[EmbeddingClient, list[str], argparse.Namespace], None]
    # More of the client's keyword arguments, from the parsed arguments.
    client_options: Callable[[argparse.Namespace], dict[str, Any]] = _no_options

    def parser(self) -> argparse.ArgumentParser:
        lines = self.doc.splitlines()
        parser = argparse.ArgumentParser(
            prog=self.prog,
            description=lines[0],
            formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog="\n".join(lines[1:]),
        )
        parser.add_argument(self.inputs, nargs="*", help=self.inputs_help)
        parser.add_argument("--file", type=Path, help="a text file (one per line) or .jsonl file")
        parser.add_argument("--field", default="text", help="the text field of JSONL objects")
        self.arguments(parser)
        _add_server(parser)
        return parser

    def main(self, argv: list[str] | None = None) -> int:
        parser = self.parser()
        args = parser.parse_args(argv)
        try:
            inputs = read_inputs(getattr(args, self.inputs), args.file, args.field, self.inputs)
        except (InputFileError, OSError, UnicodeDecodeError) as error:
            parser.error(str(error))
        if not inputs:
            parser.error(
                f"no {self.inputs}: give them as arguments, with --file, or on standard input"
            )
        try:
            with EmbeddingClient(
                str(args.url or DEFAULT_URLS[args.protocol]),
                args.protocol,
                model=args.model,
                priority=args.priority,
                retry=args.retry,
                **self.client_options(args),
            ) as client:
                self.run(client, inputs, args)
        except EmbeddingError as error:
            print(f"{self.prog}: error: {error}", file=sys.stderr)
            return 1
        return 0


def _add_server(parser: argparse.ArgumentParser) -> None:
    """Which server, and whether to retry it."""
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


def add_model(parser: argparse.ArgumentParser, help: str, default: str | None = None) -> None:
    """--model: the Triton model the command calls; required without a default."""
    parser.add_argument("--model", required=default is None, default=default, help=help)


def add_text_options(parser: argparse.ArgumentParser, prompted: str, truncated: str) -> None:
    """--prompt-name, put before `prompted` ("each text"), and --no-truncate,
    refusing `truncated` ("texts") over the model's max length."""
    parser.add_argument("--prompt-name", help=f"one of the model's prompts, put before {prompted}")
    parser.add_argument(
        "--no-truncate",
        dest="truncate",
        action="store_const",
        const=False,
        help=f"refuse {truncated} longer than the model's max length instead of cutting them",
    )
