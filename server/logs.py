"""The launcher's log lines (server/launch.py, its watchdog, the edge, the
catalog's exports): one JSON object per line by default, which a log
pipeline (Loki, Cloud Logging, Elasticsearch) indexes without a parser of
its own, or, with --log-format text, the human lines `logger: message` as
they always were.

A JSON line holds `time` (ISO 8601, UTC, milliseconds), `level` (info,
warning, error), `logger` (the text line's prefix: launcher, watchdog,
edge, catalog, tritonserver) and `message` (the text line's rest), then the
line's own fields, if any. tritonserver's own lines and the export tools'
output go to the same streams in their own formats (Triton writes no JSON).

Standard library only, as server/tracing.py: the launcher runs without the
serving environment's packages. The gateway (clients/) has its own
formatter: it cannot import server/, which is not installed with it.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import TextIO

FORMATS = ("json", "text")
DEFAULT_FORMAT = "json"
# Until a program chooses (the launcher's --log-format), the lines as they
# were: tools that export a catalog without the launcher (perf/) print to
# a person.
_format = "text"


def use_format(name: str) -> None:
    """Every later line of this process in `name` (one of FORMATS)."""
    global _format
    if name not in FORMATS:
        raise ValueError(f"log format {name!r} is not one of {', '.join(FORMATS)}")
    _format = name


def log_format() -> str:
    """The format this process's lines are in."""
    return _format


def utc_timestamp(when: datetime | None = None) -> str:
    """ISO 8601 in UTC with milliseconds and a Z, as log pipelines parse it."""
    # timezone.utc, not datetime.UTC (3.11): the GPU image runs Python 3.10.
    utc = timezone.utc  # noqa: UP017
    moment = (when or datetime.now(utc)).astimezone(utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_line(logger: str, message: str, level: str = "info", **fields: object) -> str:
    record: dict[str, object] = {
        "time": utc_timestamp(),
        "level": level,
        "logger": logger,
        "message": message,
        **fields,
    }
    # default=str: a Path or an exception in a field is written, not fatal.
    return json.dumps(record, ensure_ascii=False, default=str)


def log(
    logger: str,
    message: str,
    *,
    level: str = "info",
    stream: TextIO | None = None,
    **fields: object,
) -> None:
    """One line on `stream` (stderr by default, looked up at each call), in
    the chosen format; `fields` appear in JSON lines only."""
    line = (
        f"{logger}: {message}" if _format == "text" else json_line(logger, message, level, **fields)
    )
    out = stream or sys.stderr
    # One write per line: the watchdog's thread logs beside the main one.
    out.write(line + "\n")
    out.flush()


def add_log_format_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default=DEFAULT_FORMAT,
        help="json: one JSON object per line (time, level, logger, message), and tritonserver's "
        "lines with ISO 8601 UTC time stamps; text: the human lines 'logger: message' and "
        "Triton's default format (default: %(default)s)",
    )
