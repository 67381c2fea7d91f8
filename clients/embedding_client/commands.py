"""The commands, each declared as what it adds to the flow they all run
(command_line.py): its options, its call and how it writes its output.

- embed: texts to embeddings, as .npy, JSONL or raw bytes;
- rerank: documents ranked by relevance to a query, as JSON lines;
- embed-sparse: texts to their sparse encoder's active vocabulary entries,
  as JSON lines;
- embed-multi: texts to their multi-vector encoder's token vectors, as JSON
  lines;
- embed-m3: texts to a BGE-M3 model's outputs named, as JSON lines.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

import orjson
from tqdm import tqdm

from embedding_client.base import DEFAULT_MODEL
from embedding_client.client import EmbeddingClient
from embedding_client.command_line import Command, add_model, add_text_options
from embedding_client.decode import OPTION_DEFAULTS, ROW_DTYPES
from embedding_client.files import OUTPUT_FORMATS, EmbeddingWriter, output_format
from embedding_client.m3 import DEFAULT_OUTPUTS, M3_OUTPUTS
from embedding_client.options import (
    INPUT_TYPES,
    MULTIVECTOR_KIND,
    TRUNCATION_DIRECTIONS,
    EmbedKwargs,
)

EMBED_DOC = """embed: texts to embeddings from the shell.

    embed "first text" "second text" -o vectors.npy
    embed --file texts.txt -o vectors.npy        # one text per line
    embed --file docs.jsonl --field body -o vectors.jsonl
    embed --model e5-small-v2 --input-type query "what is Triton?"   # a catalog model
    cat texts.txt | embed --dtype int8 --format raw > vectors.i8

Texts come from the arguments, else --file, else standard input (one per
line). Row i of the output is text i. Progress goes to standard error for
files, and the throughput at the end.
"""


def _embed_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", type=Path, help="output file; standard output if absent")
    parser.add_argument("--format", choices=OUTPUT_FORMATS, help="default: from the suffix")
    add_model(parser, "the server's model (Triton name) to embed with", DEFAULT_MODEL)
    parser.add_argument("--dtype", choices=list(ROW_DTYPES), default=OPTION_DEFAULTS["dtype"])
    parser.add_argument("--dimensions", type=int, help="keep the first k dimensions")
    parser.add_argument("--no-normalize", dest="normalize", action="store_false")
    add_text_options(parser, "each text", "texts")
    parser.add_argument(
        "--input-type", choices=INPUT_TYPES, help="the model's prompt for this kind of text"
    )
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


def _embed_all(
    client: EmbeddingClient, texts: list[str], args: argparse.Namespace, stream: BinaryIO
) -> None:
    writer = EmbeddingWriter(stream, output_format(args.output, args.format), len(texts))
    show = args.file is not None and not args.quiet
    with tqdm(total=len(texts), unit="text", file=sys.stderr, disable=not show) as progress:
        for start in range(0, len(texts), args.chunk_size):
            chunk = texts[start : start + args.chunk_size]
            writer.write(client.embed(chunk, **embed_options(args)))
            progress.update(len(chunk))


def _embed(client: EmbeddingClient, texts: list[str], args: argparse.Namespace) -> None:
    start = time.perf_counter()
    if args.output is None:
        _embed_all(client, texts, args, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    else:
        with args.output.open("wb") as stream:
            _embed_all(client, texts, args, stream)
    elapsed = time.perf_counter() - start
    print(
        f"embed: {len(texts)} texts in {elapsed:.2f} s ({len(texts) / elapsed:.1f} texts/s)",
        file=sys.stderr,
    )


def _embed_client(args: argparse.Namespace) -> dict[str, Any]:
    return {"tokenizer": args.tokenizer, "max_in_flight": args.max_in_flight}


EMBED = Command(
    "embed", EMBED_DOC, "texts", "texts to embed", _embed_arguments, _embed, _embed_client
)

RERANK_DOC = """rerank: documents ranked by relevance to a query, from the shell.

    rerank --model my-reranker --query "how do I reset my password?" "doc one" "doc two"
    rerank --model my-reranker --query "..." --file docs.jsonl --field body --top-n 10

Documents come from the arguments, else --file, else standard input (one
per line). Standard output gets one JSON object per ranked document,
highest first: its index among the documents given, its score and its
text.
"""


def _rerank_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--query", required=True, help="what the documents are ranked for")
    add_model(parser, "the server's reranker (Triton name)")
    parser.add_argument("--top-n", type=int, help="keep the best n (default: all)")
    add_text_options(parser, "the query", "pairs")


def _json_lines(lines: Iterable[dict[str, Any]]) -> None:
    """One JSON object a line to standard output."""
    for line in lines:
        sys.stdout.buffer.write(orjson.dumps(line) + b"\n")


def _rerank(client: EmbeddingClient, documents: list[str], args: argparse.Namespace) -> None:
    ranked = client.rerank(
        args.query,
        documents,
        top_n=args.top_n,
        truncate=args.truncate,
        prompt_name=args.prompt_name,
    )
    _json_lines(
        {"index": each.index, "score": each.relevance_score, "text": documents[each.index]}
        for each in ranked
    )


RERANK = Command("rerank", RERANK_DOC, "documents", "documents to rank", _rerank_arguments, _rerank)

EMBED_SPARSE_DOC = """embed-sparse: texts -> their sparse encoder's active vocabulary entries, from the shell.

    embed-sparse --model my-splade "what is a learned sparse vector?" "another text"
    embed-sparse --model my-splade --file texts.jsonl --field body --max-active-dims 64

Texts come from the arguments, else --file, else standard input (one per
line). Standard output gets one JSON object per text, in order: its index,
its active entries' vocabulary indices (ascending) and their values.
"""


def _sparse_arguments(parser: argparse.ArgumentParser) -> None:
    add_model(parser, "the server's sparse encoder (Triton name)")
    parser.add_argument(
        "--max-active-dims", type=int, help="keep each text's n largest entries (default: all)"
    )
    add_text_options(parser, "each text", "texts")


def _embed_sparse(client: EmbeddingClient, texts: list[str], args: argparse.Namespace) -> None:
    rows = client.embed_sparse(
        texts,
        max_active_dims=args.max_active_dims,
        prompt_name=args.prompt_name,
        truncate=args.truncate,
    )
    _json_lines(
        {"index": index, "indices": row.indices.tolist(), "values": row.values.tolist()}
        for index, row in enumerate(rows)
    )


EMBED_SPARSE = Command(
    "embed-sparse", EMBED_SPARSE_DOC, "texts", "texts to encode", _sparse_arguments, _embed_sparse
)

EMBED_MULTI_DOC = """embed-multi: texts -> their multi-vector encoder's token vectors, from the shell.

    embed-multi --model my-colbert --kind query "what is late interaction?"
    embed-multi --model my-colbert --file docs.jsonl --field body --dtype float16
    embed-multi --model my-colbert --pool-factor 2 "a document pooled to half its vectors"

Texts come from the arguments, else --file, else standard input (one per
line). Standard output gets one JSON object per text, in order: its index and
its vectors, one list of values per vector (packed bytes for binary dtypes).
"""


def _multi_arguments(parser: argparse.ArgumentParser) -> None:
    add_model(parser, "the server's multi-vector encoder (Triton name)")
    parser.add_argument(
        "--kind",
        choices=INPUT_TYPES,
        default=MULTIVECTOR_KIND,
        help=f"the role the texts are encoded in (default: {MULTIVECTOR_KIND})",
    )
    parser.add_argument(
        "--dtype", choices=list(ROW_DTYPES), default=OPTION_DEFAULTS["dtype"], help="vector format"
    )
    parser.add_argument(
        "--no-truncate",
        dest="truncate",
        action="store_const",
        const=False,
        help="refuse texts longer than the role's max length instead of cutting them",
    )
    parser.add_argument(
        "--pool-factor",
        type=float,
        help="documents only: keep about 1/N of each text's vectors (token pooling; 1: all)",
    )


def _embed_multi(client: EmbeddingClient, texts: list[str], args: argparse.Namespace) -> None:
    vectors = client.embed_multi(
        texts,
        kind=args.kind,
        dtype=args.dtype,
        truncate=args.truncate,
        pool_factor=args.pool_factor,
    )
    _json_lines({"index": index, "vectors": each.tolist()} for index, each in enumerate(vectors))


EMBED_MULTI = Command(
    "embed-multi", EMBED_MULTI_DOC, "texts", "texts to encode", _multi_arguments, _embed_multi
)

EMBED_M3_DOC = """embed-m3: texts -> a BGE-M3 model's dense, sparse and ColBERT outputs, from the shell.

    embed-m3 --model bge-m3 --output dense --output sparse "what is BGE-M3?"
    embed-m3 --model bge-m3 --output multivector --file docs.jsonl --field body

Texts come from the arguments, else --file, else standard input (one per
line). The server runs the model once and returns the outputs named (dense by
default). Standard output gets one JSON object per text, in order: its index
and each output named: "dense" (its values), "sparse" (its active entries'
vocabulary indices, ascending, and their values) and "multivector" (one list
of values per vector).
"""


def _m3_arguments(parser: argparse.ArgumentParser) -> None:
    add_model(parser, "the server's BGE-M3 model (Triton name)")
    parser.add_argument(
        "--output",
        dest="outputs",
        action="append",
        choices=list(M3_OUTPUTS),
        help=f"an output to return (repeat for more; default: {', '.join(DEFAULT_OUTPUTS)})",
    )
    parser.add_argument(
        "--dtype",
        choices=list(ROW_DTYPES),
        default=OPTION_DEFAULTS["dtype"],
        help="the outputs' format (sparse values: float32 or float16)",
    )
    add_text_options(parser, "each text", "texts")


def _embed_m3(client: EmbeddingClient, texts: list[str], args: argparse.Namespace) -> None:
    result = client.embed_m3(
        texts,
        outputs=args.outputs or DEFAULT_OUTPUTS,
        dtype=args.dtype,
        prompt_name=args.prompt_name,
        truncate=args.truncate,
    )

    def line(index: int) -> dict[str, Any]:
        fields: dict[str, Any] = {"index": index}
        if result.dense is not None:
            fields["dense"] = result.dense[index].tolist()
        if result.sparse is not None:
            row = result.sparse[index]
            fields["sparse"] = {"indices": row.indices.tolist(), "values": row.values.tolist()}
        if result.multivector is not None:
            fields["multivector"] = result.multivector[index].tolist()
        return fields

    _json_lines(line(index) for index in range(len(texts)))


EMBED_M3 = Command("embed-m3", EMBED_M3_DOC, "texts", "texts to encode", _m3_arguments, _embed_m3)

# The installed commands (clients/pyproject.toml's scripts).
embed = EMBED.main
rerank = RERANK.main
embed_sparse = EMBED_SPARSE.main
embed_multi = EMBED_MULTI.main
embed_m3 = EMBED_M3.main
