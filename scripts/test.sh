#!/usr/bin/env bash
# README command 2: set up what is missing, lint, then run the whole test
# suite (pytest; it also builds and runs the C++ unit tests under ASan/UBSan).
set -euo pipefail
cd "$(dirname "$0")/.."
# Which processor class ran this, so a failure report says where it came from.
python3 -m harness.processor
scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"
