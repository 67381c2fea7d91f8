#!/usr/bin/env bash
# README command 1: set up what is missing, then run tritonserver in the
# foreground with the embedding ensemble, under server/launch.py (stub
# watchdog, graceful drain). Arguments go to the launcher (--host,
# --http-port, --grpc-port, --metrics-port, --model-repository,
# --model-config-name, --triton-home); the admin key comes from the
# environment variable TRITON_ADMIN_KEY, never from an argument.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m server.launch "$@"
