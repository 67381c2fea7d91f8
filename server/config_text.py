"""Reading and editing a shipped config.pbtxt's text: the launcher writes each served config
as the shipped one with a few fields set, its comments kept (server/served_repository.py), and
reads a stage's parameters where it acts on them first (server/engine_probe.py). Standard
library only, like the launcher."""

from __future__ import annotations

import re
from collections.abc import Callable

# Edits of a shipped config's text.
Edit = Callable[[str], str]


def _parameter_pattern(key: str) -> str:
    return rf'(key:\s*"{re.escape(key)}"\s*value:\s*\{{\s*string_value:\s*")([^"]*)(")'


def replace(text: str, pattern: str, value: str, what: str) -> str:
    """`text` with every match of `pattern`'s group 2 set to `value`;
    raises ValueError when nothing matches, naming `what`."""
    edited, count = re.subn(pattern, lambda m: m.group(1) + value + m.group(3), text)
    if count == 0:
        raise ValueError(f"no {what} to set")
    return edited


def parameter(key: str, value: str) -> Edit:
    return lambda text: replace(text, _parameter_pattern(key), value, f"parameter {key!r}")


def parameter_value(text: str, key: str) -> str | None:
    """A parameter's string value, or None where the config declares none."""
    found = re.search(_parameter_pattern(key), text)
    return found.group(2) if found else None
