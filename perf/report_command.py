"""What the report commands share: a report written to its file and shown."""

from __future__ import annotations

from pathlib import Path


def write_report(path: Path, report: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report)
    print(report)
