#!/usr/bin/env bash
# README command 2: set up what is missing, lint, then run the whole test
# suite (pytest; it also builds and runs the C++ unit tests under ASan/UBSan).
set -euo pipefail
cd "$(dirname "$0")/.."
# Which processor class ran this, so a failure report says where it came from.
PYTHONPATH=model_common python3 -m model_common.processor
scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# The tests fork Envoy (and others) from a process whose gRPC clients keep
# threads; grpcio's fork support then restarts its pollers in the child
# before exec, where they fail on closed descriptors and the edge once never
# started (tests/test_retry.py, an "epoll_wait error: Bad file descriptor" in
# envoy.log). Nothing here forks a gRPC client on purpose.
export GRPC_ENABLE_FORK_SUPPORT=false
exec .venv/bin/python -m pytest "$@"
