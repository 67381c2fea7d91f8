#!/usr/bin/env bash
# Creates or reuses everything the server and the tests need: system
# packages, the two virtual environments, the C++ serializer backend, the
# exported default model, perf_analyzer and the tools the tests run (helm,
# jaeger, olah). Safe to run again: finished steps are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup: %s\n' "$*" >&2; }

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    log "missing system packages: $*; install them (apt-get install $*) and re-run"
    exit 1
  fi
  log "installing system packages: $*"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

system_packages() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v g++ >/dev/null || missing+=(g++)
  [ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
  # Header-only JSON for the serializer backend.
  [ -f /usr/include/nlohmann/json.hpp ] || missing+=(nlohmann-json3-dev)
  python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  # Triton's Python-backend stub links against the shared libpython.
  local version
  version=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  ldconfig -p | grep -q "libpython${version}.so.1.0" || missing+=("libpython${version}")
  # The scale-out tests' Prometheus, run as their own process (no daemon).
  [ -x /usr/bin/prometheus ] || missing+=(prometheus)
  if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
  fi
}

# FILE, the requirements files it includes (-r), recursively, and the
# pyproject.toml of each project it installs editable (-e ./DIR): a changed
# entry point or dependency there needs the environment installed again.
requirement_files() {
  local file=$1 included project
  echo "$file"
  for project in $(sed -n 's/^-e[[:space:]]*//p' "$file"); do
    echo "$project/pyproject.toml"
  done
  for included in $(sed -n 's/^-r[[:space:]]*//p' "$file"); do
    requirement_files "$(dirname "$file")/$included"
  done
}

# The hash of REQUIREMENTS and the files it includes, and of NO_DEPS where
# given.
requirements_hash() {
  { requirement_files "$1"; [ -z "${2:-}" ] || echo "$2"; } | xargs cat | sha256sum | cut -d' ' -f1
}

# venv_current DIR REQUIREMENTS [NO_DEPS]: whether DIR was installed from these.
venv_current() {
  [ -f "$1/.requirements.sha256" ] &&
    [ "$(cat "$1/.requirements.sha256")" = "$(requirements_hash "$2" "${3:-}")" ]
}

# venv DIR REQUIREMENTS [NO_DEPS]: (re)installs when the requirements file, or
# one it includes, changed, with the installer pip puts in the environment
# first (requirements/installer.txt); it reads the system's certificates, as
# pip here does. NO_DEPS, a requirements file installed after without its
# packages' dependencies, is for a package whose pins clash with
# REQUIREMENTS' though what is used of it does not (fastembed's
# huggingface-hub<2). Each failure returns at once: where the caller is a
# condition (an && list), errexit does not stop a function.
venv() {
  local dir=$1 requirements=$2 no_deps=${3:-}
  venv_current "$dir" "$requirements" "$no_deps" && return 0
  log "creating $dir from $requirements"
  rm -f "$dir/.requirements.sha256"
  python3 -m venv "$dir" || return
  "$dir/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir \
    -r requirements/installer.txt || return
  UV_NATIVE_TLS=1 "$dir/bin/uv" pip install --quiet --no-cache --compile-bytecode \
    --python "$dir/bin/python" -r "$requirements" || return
  if [ -n "$no_deps" ]; then
    UV_NATIVE_TLS=1 "$dir/bin/uv" pip install --quiet --no-cache --compile-bytecode \
      --python "$dir/bin/python" --no-deps -r "$no_deps" || return
  fi
  requirements_hash "$requirements" "$no_deps" >"$dir/.requirements.sha256"
}

# A set-up from nothing took 11.8 GiB at its fullest, during the Jaeger
# build beside the export environment's install (Debian 12, 2026-11-29),
# and keeps 7.7 GiB (2026-11-27; the export environment's torch with its
# CUDA libraries is 6.2 GiB). With less than that and a
# margin free, a set-up that would fail part-way through pip or a Go build
# is refused before it starts, with the reason.
NEEDED_MIB=13312
disk_space() {
  venv_current .venv-export requirements/export.txt requirements/export-no-deps.txt &&
    venv_current .venv requirements/serve.txt && return 0
  local free
  free=$(df -Pm . | awk 'NR == 2 { print $4 }')
  if [ "$free" -lt "$NEEDED_MIB" ]; then
    log "$free MiB free on $(df -P . | awk 'NR == 2 { print $6 }'), and a set-up from nothing needs about $NEEDED_MIB MiB: free some and re-run"
    exit 1
  fi
}

build_backend() {
  cmake -S backends/embedding_serializer -B build/serializer \
    -DCMAKE_BUILD_TYPE=Release -DEMBEDDING_SERIALIZER_TESTS=OFF >/dev/null
  cmake --build build/serializer --parallel >/dev/null
}

# checked_here RECORD: whether the OpenVINO export recorded there chose its
# setting on this class of processor (a precision's rounding, and whether the
# engine dies, differ between classes), as the settings are recorded today.
checked_here() {
  PYTHONPATH=model_common python3 - "$1" <<'PY'
import json
import sys

from model_common.processor import this_processor

openvino = json.load(open(sys.argv[1])).get("openvino", {})
here = openvino.get("processor_class") == this_processor().cls
sys.exit(0 if here and "threads_per_stream" in openvino else 1)
PY
}

export_model() {
  local repository=model_repository
  # What export/export_onnx.py writes; anything missing means export again.
  local written=(onnx_cpu/embedder/1/model.onnx shared/tokenizer/1/tokenizer.json
    onnx_cpu/embedder/1/export.json torch_gpu/embedder/1/export.json
    shared/tokenizer/1/export.json)
  local file missing=0
  for file in "${written[@]}"; do
    [ -f "$repository/$file" ] || missing=1
  done
  if [ "$missing" = 1 ]; then
    log "exporting the default model (all-MiniLM-L6-v2) to ONNX"
    .venv-export/bin/python export/export_onnx.py --repository "$repository"
    # The IR was converted from the graph just replaced.
    rm -f "$repository/openvino_cpu/embedder/1/export.json"
  fi
  local converted=(openvino_cpu/embedder/1/model.xml openvino_cpu/embedder/1/model.bin
    openvino_cpu/embedder/1/export.json)
  missing=0
  for file in "${converted[@]}"; do
    [ -f "$repository/$file" ] || missing=1
  done
  if [ "$missing" = 0 ] && ! checked_here "$repository/openvino_cpu/embedder/1/export.json"; then
    log "the OpenVINO IR was checked on another class of processor: checking it on this one"
    missing=1
  fi
  [ "$missing" = 1 ] || return 0
  log "converting the ONNX graph to OpenVINO IR (checked in the setting it serves in)"
  .venv-export/bin/python export/export_openvino.py --repository "$repository"
}

serving_and_tools() {
  venv .venv requirements/serve.txt
  scripts/install_perf_analyzer.sh
  scripts/install_olah.sh
}

# Steps running in the background, each its own process group (set -m), so
# that a failed set-up stops them, children and all, rather than leaving
# them writing on or holding the caller's output open.
background=()
in_background() {
  set -m
  "$@" &
  background+=("$!")
  set +m
}
stop_background() {
  local pid
  for pid in "${background[@]}"; do
    kill -- "-$pid" 2>/dev/null || true
  done
}
trap stop_background EXIT

# Independent steps run side by side: pip mostly waits on downloads and
# unpacking, so the export environment (torch, the largest), the serving one
# and its downloaded tools overlap the builds that take the cores (the Go
# tools and the C++ backend), which then start at once rather than after
# the serving environment. The export runs alone: it times the CPU engines
# to choose one.
# `wait PID` fails the set-up with the step's own exit status.
system_packages
disk_space
in_background venv .venv-export requirements/export.txt requirements/export-no-deps.txt
export_venv=$!
in_background serving_and_tools
serving=$!
in_background scripts/install_jaeger.sh
tools=$!
build_backend
wait "$serving"
wait "$tools"
wait "$export_venv"
export_model
