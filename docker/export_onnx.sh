#!/bin/sh
# Exports the default model to ONNX, then converts it to OpenVINO IR (the CPU
# image's embedder), into the mounted model repository, each unless already
# there (as scripts/setup.sh does on a workstation).
set -eu
repository=/workspace/model_repository
if [ -f "$repository/onnx_cpu/embedder/1/model.onnx" ] &&
  [ -f "$repository/onnx_cpu/embedder/1/export.json" ] &&
  [ -f "$repository/shared/tokenizer/1/tokenizer.json" ]; then
  echo "onnx-export: $repository already holds the ONNX export"
else
  python export/export_onnx.py --repository "$repository"
  # The IR was converted from the graph just replaced.
  rm -f "$repository/openvino_cpu/embedder/1/export.json"
fi
if [ -f "$repository/openvino_cpu/embedder/1/model.xml" ] &&
  [ -f "$repository/openvino_cpu/embedder/1/model.bin" ] &&
  [ -f "$repository/openvino_cpu/embedder/1/export.json" ]; then
  echo "onnx-export: $repository already holds the OpenVINO IR"
  exit 0
fi
exec python export/export_openvino.py --repository "$repository"
