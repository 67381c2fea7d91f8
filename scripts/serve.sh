#!/usr/bin/env bash
# README command 1: set up what is missing, then run tritonserver in the
# foreground with the embedding ensemble. Arguments go to server/launch.py
# (--host, --http-port, --grpc-port, --metrics-port, --model-repository).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m server.launch "$@"
