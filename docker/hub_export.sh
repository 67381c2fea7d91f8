#!/bin/sh
# Fetches the model EMBEDDING_MODEL_ID names into the Hugging Face cache
# (HF_HOME) and exports it under EMBEDDING_EXPORTS, once, with the
# launcher's --prepare-only: the one-shot hub-export service of
# docker-compose.yml, before triton-cpu serves it from there offline.
# Without a model id the server serves its catalog, from the model
# repository: nothing to do here.
set -eu
if [ -z "${EMBEDDING_MODEL_ID:-}" ]; then
  echo "hub-export: no MODEL_ID; the server serves its catalog"
  exit 0
fi
exec python3 -m server.launch --prepare-only "$@"
