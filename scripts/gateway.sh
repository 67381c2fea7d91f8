#!/usr/bin/env bash
# The gateway (embedding-gateway) run from this checkout, told where its
# catalog's exports are (the model repository and the launcher's exports
# folder, as server/paths.py names them), so that --catalog FILE needs no
# more: the arguments are the gateway's (--log-format text for human lines
# instead of JSON ones among them, and --otlp-endpoint URL for its spans;
# EMBEDDING_OTLP_ENDPOINT and EMBEDDING_TRACE_SAMPLING give their defaults,
# as the launcher's).
#   scripts/gateway.sh --triton-url 127.0.0.1:8001 --catalog models.toml
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t folders < <(.venv/bin/python -c \
  'from server.paths import EXPORTS, MODEL_REPOSITORY; print(MODEL_REPOSITORY); print(EXPORTS)')
exec .venv/bin/embedding-gateway --model-repository "${folders[0]}" --exports "${folders[1]}" "$@"
