"""Running a script in the export environment (.venv-export, where torch
and sentence-transformers are) for callers that have neither: the tests and
perf/. Its output comes back as text; a missing environment says how to make
it."""

from __future__ import annotations

import subprocess

from server.paths import EXPORT_PYTHON, REPO_ROOT

TIMEOUT_S = 300.0


def run_in_export_environment(
    arguments: list[str], stdin: str | None = None, *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`.venv-export/bin/python ARGUMENTS` from the repository root."""
    if not EXPORT_PYTHON.exists():
        raise FileNotFoundError(f"{EXPORT_PYTHON} is missing; run scripts/setup.sh")
    return subprocess.run(
        [str(EXPORT_PYTHON), *arguments],
        cwd=REPO_ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=check,
    )
