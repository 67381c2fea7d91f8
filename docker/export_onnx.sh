#!/bin/sh
# Exports the default model to ONNX into the mounted model repository unless
# an export is already there (as scripts/setup.sh does on a workstation).
set -eu
repository=/workspace/model_repository
if [ -f "$repository/onnx_cpu/embedder/1/model.onnx" ] &&
  [ -f "$repository/onnx_cpu/embedder/1/export.json" ] &&
  [ -f "$repository/shared/tokenizer/1/tokenizer.json" ]; then
  echo "onnx-export: $repository already holds the ONNX export"
  exit 0
fi
exec python export/export_onnx.py --repository "$repository"
