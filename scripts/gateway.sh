#!/usr/bin/env bash
# The gateway (embedding-gateway) run from this checkout, where --catalog
# FILE finds each catalog model's export: the arguments are the gateway's
# (--log-format text for human lines instead of JSON ones among them, and
# --otlp-endpoint URL for its spans; EMBEDDING_OTLP_ENDPOINT and
# EMBEDDING_TRACE_SAMPLING give their defaults, as the launcher's).
#   scripts/gateway.sh --triton-url 127.0.0.1:8001 --catalog models.toml
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m embedding_client.gateway.server "$@"
