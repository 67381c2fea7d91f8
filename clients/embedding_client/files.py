"""The CLI's inputs and outputs: texts from a text or JSONL file, embeddings
to .npy, JSONL or raw bytes, written chunk by chunk as they arrive."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np
import orjson

OutputFormat = Literal["npy", "jsonl", "raw"]
OUTPUT_FORMATS: tuple[OutputFormat, ...] = ("npy", "jsonl", "raw")
JSONL_SUFFIXES = {".jsonl", ".ndjson"}


class InputFileError(ValueError):
    pass


def read_inputs(items: list[str], file: Path | None, field: str, what: str) -> list[str]:
    """A command's texts: its arguments, else --file, else standard input
    (one per line); `what` names them in the refusal of both."""
    if items and file:
        raise InputFileError(f"give {what} as arguments or --file, not both")
    if items:
        return list(items)
    if file:
        return read_text_file(file, field)
    return sys.stdin.read().splitlines()


def read_text_file(path: Path, field: str) -> list[str]:
    """A .jsonl/.ndjson file holds one JSON string, or object with `field`,
    per line; any other file one text per line."""
    content = path.read_text(encoding="utf-8")
    if path.suffix.lower() not in JSONL_SUFFIXES:
        return content.splitlines()
    return [
        _jsonl_text(line, number, field, path)
        for number, line in enumerate(content.splitlines(), start=1)
        if line.strip()
    ]


def _jsonl_text(line: str, number: int, field: str, path: Path) -> str:
    try:
        item = orjson.loads(line)
    except orjson.JSONDecodeError as error:
        raise InputFileError(f"{path}:{number}: not valid JSON ({error})") from error
    text = item.get(field) if isinstance(item, dict) else item
    if not isinstance(text, str):
        raise InputFileError(
            f"{path}:{number}: expected a string or an object with a string {field!r}"
        )
    return text


def output_format(path: Path | None, requested: OutputFormat | None) -> OutputFormat:
    """An explicit format wins; else .npy and .jsonl/.ndjson by suffix, other
    files raw, standard output JSONL."""
    if requested is not None:
        return requested
    if path is None:
        return "jsonl"
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return "npy"
    return "jsonl" if suffix in JSONL_SUFFIXES else "raw"


class EmbeddingWriter:
    """Writes [n, k] chunks in order. npy knows the total row count up front,
    so its header goes out with the first chunk and the rows stream after it."""

    def __init__(self, stream: BinaryIO, kind: OutputFormat, total_rows: int) -> None:
        self._stream = stream
        self._kind = kind
        self._total_rows = total_rows
        self._written = 0

    def write(self, vectors: np.ndarray) -> None:
        if self._kind == "jsonl":
            self._write_jsonl(vectors)
        else:
            if self._kind == "npy" and self._written == 0:
                self._write_npy_header(vectors)
            self._stream.write(vectors.tobytes())
        self._written += len(vectors)

    def _write_npy_header(self, first: np.ndarray) -> None:
        header = {
            "descr": np.lib.format.dtype_to_descr(first.dtype),
            "fortran_order": False,
            "shape": (self._total_rows, first.shape[1]),
        }
        np.lib.format.write_array_header_1_0(self._stream, header)

    def _write_jsonl(self, vectors: np.ndarray) -> None:
        options = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
        for offset, row in enumerate(vectors):
            self._stream.write(
                orjson.dumps({"index": self._written + offset, "embedding": row}, option=options)
            )
