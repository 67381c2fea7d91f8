"""What the report commands share: the output file and seconds per phase on
the command line, and a report written there and shown."""

from __future__ import annotations

import argparse
from pathlib import Path


def report_arguments(description: str, seconds_help: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=20.0, help=seconds_help)
    return parser.parse_args()


def write_report(path: Path, report: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report)
    print(report)
