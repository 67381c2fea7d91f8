#!/usr/bin/env bash
# The GPU kit (perf/gpu/), for a GPU machine that has python3 with torch,
# transformers and sentence-transformers but no package registry:
#
#   scripts/gpu_kit.sh pack           here: set up what is missing, then write
#                                     build/gpu_kit/gpu_kit.tar.xz and print its size
#   scripts/gpu_kit.sh run OUT [ARGS] there, from this repository's root with
#                                     build/gpu_kit beside it: unpack to local disk
#                                     and run perf.gpu.run (ARGS) into OUT
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: $0 pack | run OUT_DIR [perf.gpu.run arguments]" >&2
  exit 2
}

case "${1:-}" in
  pack)
    scripts/setup.sh
    exec .venv/bin/python -m perf.gpu.pack
    ;;
  run)
    [ $# -ge 2 ] || usage
    out=$(realpath "$2")
    shift 2
    archive=$PWD/build/gpu_kit/gpu_kit.tar.xz
    kit=${GPU_KIT_DIR:-/tmp/gpu_kit}
    python=${GPU_KIT_PYTHON:-python3}
    [[ $python == */* ]] && python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")
    repository=$PWD
    rm -rf "$kit"
    mkdir -p "$kit"
    tar -C "$kit" -xJf "$archive"
    cd "$kit"
    # The stubs run in a virtual environment made here: python3's own
    # packages (a .pth file adds them), this checkout's model_common (the
    # models import it) and, where python3 has numpy 2, the kit's numpy 1.x
    # in front, since Triton 2.51's stubs need numpy 1.x (perf/gpu/pack.py,
    # STUB_NUMPY). The run itself stays on python3: its scipy and sklearn
    # need numpy 2.
    version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    packages=$("$python" -c 'import site; print(site.getsitepackages()[0])')
    interpreter=$(readlink -f "$(command -v "$python")")
    environment=$kit/python_env
    site_packages=$environment/lib/python$version/site-packages
    mkdir -p "$environment/bin" "$site_packages"
    ln -s "$interpreter" "$environment/bin/python3"
    printf 'home = %s\ninclude-system-site-packages = false\nversion = %s\n' \
      "$(dirname "$interpreter")" "$version" >"$environment/pyvenv.cfg"
    if ! "$python" -c 'import sys, numpy; sys.exit(int(numpy.__version__.split(".")[0]) >= 2)'; then
      carried=$kit/numpy_cp${version/./}
      [ -d "$carried" ] || { echo "gpu_kit: no numpy 1.x for Python $version in the kit" >&2; exit 1; }
      cp -r "$carried/." "$site_packages/"
    fi
    echo "$repository/model_common" >"$site_packages/model_common.pth"
    echo "$packages" >"$site_packages/machine_packages.pth"
    stub_python=(--stub-python "$environment/bin/python3")
    PYTRITON_ROOT=$kit/triton/pytriton PYTHONPATH=$kit/python_packages \
      exec "$python" -m perf.gpu.run --out "$out" "${stub_python[@]}" "$@"
    ;;
  *) usage ;;
esac
