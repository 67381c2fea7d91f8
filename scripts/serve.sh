#!/usr/bin/env bash
# README command 1: set up what is missing, then serve a model catalog under
# server/launch.py, in the foreground: it exports the catalog's models whose
# export is missing or stale, writes the repository that serves them all
# (server/served_repository.py) and runs tritonserver on it (stub watchdog,
# graceful drain).
#
#   scripts/serve.sh [--catalog FILE | --model-id ORG/NAME [--revision R] [--name N]]
#                    [--tenants FILE] [launcher arguments]
#
# --catalog: the model catalog (default: models.toml). --model-id: one
# Hugging Face Hub model instead, downloaded into the Hugging Face cache
# (HF_TOKEN, HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE hold; README, "Models
# by Hub id"); its name is the id's last part unless --name gives one.
# --tenants: a tenants file; Envoy then takes the public ports with each
# tenant's keys, models, quota and priority (docs/operations.md,
# "Tenants"). Other arguments go to
# the launcher (--host, --http-port, --grpc-port, --metrics-port,
# --triton-home, for traces --otlp-endpoint URL and --trace-sampling RATIO,
# --log-format json|text: JSON lines by default); the admin key comes from
# the environment variable TRITON_ADMIN_KEY, never from an argument.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
launcher=()
while [ $# -gt 0 ]; do
  case $1 in
    # The launcher runs from the repository root: these paths are the caller's.
    --catalog) launcher+=("--catalog=$(cd "$caller" && realpath "$2")"); shift 2 ;;
    --catalog=*) launcher+=("--catalog=$(cd "$caller" && realpath "${1#*=}")"); shift ;;
    --tenants) launcher+=("--tenants=$(cd "$caller" && realpath "$2")"); shift 2 ;;
    --tenants=*) launcher+=("--tenants=$(cd "$caller" && realpath "${1#*=}")"); shift ;;
    *) launcher+=("$1"); shift ;;
  esac
done
scripts/setup.sh
exec .venv/bin/python -m server.launch "${launcher[@]}"
