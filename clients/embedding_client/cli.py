"""embed: texts to embeddings from the shell.

    embed "first text" "second text" -o vectors.npy
    embed --file texts.txt -o vectors.npy        # one text per line
    embed --file docs.jsonl --field body -o vectors.jsonl
    embed --model e5-small-v2 --input-type query "what is Triton?"   # a catalog model
    cat texts.txt | embed --dtype int8 --format raw > vectors.i8

Texts come from the arguments, else --file, else standard input (one per
line). Row i of the output is text i. Progress goes to standard error for
files, and the throughput at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from embedding_client.base import DEFAULT_MODEL
from embedding_client.client import EmbeddingClient
from embedding_client.command_line import (
    add_inputs,
    add_no_truncate,
    add_prompt_name,
    add_server,
    command_parser,
    server_url,
)
from embedding_client.decode import OPTION_DEFAULTS, ROW_DTYPES
from embedding_client.errors import EmbeddingError
from embedding_client.files import (
    OUTPUT_FORMATS,
    EmbeddingWriter,
    InputFileError,
    output_format,
    read_inputs,
)
from embedding_client.options import INPUT_TYPES, TRUNCATION_DIRECTIONS, EmbedKwargs


def parser() -> argparse.ArgumentParser:
    parser = command_parser("embed", __doc__)
    add_inputs(parser, "texts", "texts to embed")
    parser.add_argument("-o", "--output", type=Path, help="output file; standard output if absent")
    parser.add_argument("--format", choices=OUTPUT_FORMATS, help="default: from the suffix")
    add_server(parser)
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help="the server's model (Triton name) to embed with"
    )
    parser.add_argument("--dtype", choices=list(ROW_DTYPES), default=OPTION_DEFAULTS["dtype"])
    parser.add_argument("--dimensions", type=int, help="keep the first k dimensions")
    parser.add_argument("--no-normalize", dest="normalize", action="store_false")
    add_prompt_name(parser, "each text")
    parser.add_argument(
        "--input-type", choices=INPUT_TYPES, help="the model's prompt for this kind of text"
    )
    add_no_truncate(parser, "texts")
    parser.add_argument(
        "--truncation-direction",
        choices=TRUNCATION_DIRECTIONS,
        help="which end of an over-long text is cut (the server's default: right)",
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        help="tokenize here with the model's tokenizer.json (the server does, with a text option)",
    )
    parser.add_argument("--max-in-flight", type=int, default=4)
    parser.add_argument("--chunk-size", type=int, default=1024, help="texts per progress step")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return parser


def embed_all(
    client: EmbeddingClient, texts: list[str], args: argparse.Namespace, stream: BinaryIO
) -> None:
    writer = EmbeddingWriter(stream, output_format(args.output, args.format), len(texts))
    show = args.file is not None and not args.quiet
    with tqdm(total=len(texts), unit="text", file=sys.stderr, disable=not show) as progress:
        for start in range(0, len(texts), args.chunk_size):
            chunk = texts[start : start + args.chunk_size]
            writer.write(client.embed(chunk, **embed_options(args)))
            progress.update(len(chunk))


def embed_options(args: argparse.Namespace) -> EmbedKwargs:
    return {
        "dtype": args.dtype,
        "dimensions": args.dimensions,
        "normalize": args.normalize,
        "prompt_name": args.prompt_name,
        "input_type": args.input_type,
        "truncate": args.truncate,
        "truncation_direction": args.truncation_direction,
    }


def run(args: argparse.Namespace, texts: list[str]) -> None:
    url = server_url(args)
    with EmbeddingClient(
        url,
        args.protocol,
        tokenizer=args.tokenizer,
        model=args.model,
        max_in_flight=args.max_in_flight,
        priority=args.priority,
        retry=args.retry,
    ) as client:
        if args.output is None:
            embed_all(client, texts, args, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            with args.output.open("wb") as stream:
                embed_all(client, texts, args, stream)


def main(argv: list[str] | None = None) -> int:
    command = parser()
    args = command.parse_args(argv)
    try:
        texts = read_inputs(args.texts, args.file, args.field, "texts")
    except (InputFileError, OSError, UnicodeDecodeError) as error:
        command.error(str(error))
    if not texts:
        command.error("no texts: give them as arguments, with --file, or on standard input")
    start = time.perf_counter()
    try:
        run(args, texts)
    except EmbeddingError as error:
        print(f"embed: error: {error}", file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - start
    print(
        f"embed: {len(texts)} texts in {elapsed:.2f} s ({len(texts) / elapsed:.1f} texts/s)",
        file=sys.stderr,
    )
    return 0
