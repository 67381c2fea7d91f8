"""Read the launcher's and the gateway's logs as the tests do: their JSON
lines (server/logs.py, embedding_gateway/logs.py, the default
format) as records, among the lines of tritonserver, the export tools and
Envoy, which have formats of their own."""

from __future__ import annotations

import json
from typing import Any

# What every JSON line of ours holds.
RECORD_FIELDS = frozenset({"time", "level", "logger", "message"})


def record(line: str) -> dict[str, Any] | None:
    """The line as one of our JSON records, or None: another program's line,
    or one still being written when the log was read."""
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or not RECORD_FIELDS <= set(value):
        return None
    return value


def records(text: str, logger: str | None = None) -> list[dict[str, Any]]:
    """The records of a log, in order; of `logger` only, where given."""
    found = (record(line) for line in text.splitlines())
    return [r for r in found if r is not None and logger in (None, r["logger"])]


def messages(text: str, logger: str) -> list[str]:
    return [str(r["message"]) for r in records(text, logger)]


def first_index(text: str, logger: str, fragment: str) -> int:
    """The position among the log's records of the first of `logger` whose
    message holds `fragment`; -1 where none does."""
    for index, found in enumerate(records(text)):
        if found["logger"] == logger and fragment in str(found["message"]):
            return index
    return -1
