#!/usr/bin/env bash
# README command 1: set up what is missing, export the catalog's models whose
# export is missing or stale, write the repository that serves them all
# (server/served_repository.py), then run tritonserver in the foreground on
# it, under server/launch.py (stub watchdog, graceful drain).
#
#   scripts/serve.sh [--catalog FILE] [launcher arguments]
#
# --catalog: the model catalog (default: models.toml). Other arguments go to
# the launcher (--host, --http-port, --grpc-port, --metrics-port,
# --triton-home); the admin key comes from the environment variable
# TRITON_ADMIN_KEY, never from an argument.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
catalog=$PWD/models.toml
launcher=()
while [ $# -gt 0 ]; do
  case $1 in
    --catalog) catalog=$(cd "$caller" && realpath "$2"); shift 2 ;;
    --catalog=*) catalog=$(cd "$caller" && realpath "${1#*=}"); shift ;;
    *) launcher+=("$1"); shift ;;
  esac
done
scripts/setup.sh
.venv/bin/python -m server.served_repository --catalog "$catalog" --out build/served
exec .venv/bin/python -m server.launch --model-repository build/served "${launcher[@]}"
