#!/usr/bin/env bash
# Installs Triton's perf_analyzer into build/perf_analyzer/ and writes the
# launcher build/perf_analyzer/perf_analyzer, which perf/perf_analyzer.py
# runs. Safe to run again: a working launcher is kept as it is.
#
# The PyPI wheel (perf-analyzer 2.60.0) is built for glibc 2.38, so pip on an
# older system (Debian 12: glibc 2.36) refuses it. The wheel is downloaded
# for its platform tag anyway and unpacked; where the system glibc is older,
# the binary runs through Debian 13's C and C++ runtime (from Debian's own
# archive, unpacked into this folder, never installed system-wide) by
# invoking that glibc's loader directly.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=2.60.0
WHEEL=perf_analyzer-${VERSION}-py3-none-manylinux_2_38_x86_64.whl
WHEEL_SHA256=23ef56b107ae9233e5cf09fbdf508dd9b936a52f1bae2f63f53c8117087b3f25
# Everything the binary links against (readelf -d: NEEDED; libcrypto needs
# libzstd), from one suite so the private runtime does not depend on which
# of them the host has.
RUNTIME_PACKAGES=(libc6 libstdc++6 libgcc-s1 libssl3t64 zlib1g libzstd1)
RUNTIME_SUITE=trixie

DIR=$PWD/build/perf_analyzer
BINARY=$DIR/wheel/perf_analyzer/bin/perf_analyzer
RUNTIME=$DIR/runtime
LAUNCHER=$DIR/perf_analyzer

log() { printf 'install_perf_analyzer: %s\n' "$*" >&2; }

if [ -x "$LAUNCHER" ] && "$LAUNCHER" --version >/dev/null 2>&1; then
  exit 0
fi

mkdir -p "$DIR"

fetch_wheel() {
  if [ ! -f "$DIR/$WHEEL" ]; then
    log "downloading $WHEEL from PyPI"
    local python=python3
    [ -x .venv/bin/python ] && python=.venv/bin/python
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --platform manylinux_2_38_x86_64 \
      --dest "$DIR" "perf-analyzer==$VERSION"
  fi
  echo "$WHEEL_SHA256  $DIR/$WHEEL" | sha256sum --check --quiet
  rm -rf "$DIR/wheel"
  python3 -m zipfile -e "$DIR/$WHEEL" "$DIR/wheel"
  chmod +x "$BINARY"
}

glibc_at_least_2_38() {
  local version
  version=$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)
  [ "$(printf '%s\n2.38\n' "$version" | sort -V | head -n1)" = 2.38 ]
}

# The Debian archive the host's own apt sources use for its release (deb822
# .sources files or one-line .list files), so no mirror is named here.
debian_mirror() {
  local codename mirror
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  mirror=$(
    {
      awk -v suite="$codename" '/^URIs:/ { uri = $2 }
        /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) print uri }' \
        /etc/apt/sources.list.d/*.sources 2>/dev/null
      sed -E 's/\[[^]]*\] //' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk -v suite="$codename" '$1 == "deb" && $3 == suite { print $2 }'
    } | head -n1
  )
  if [ -z "$mirror" ]; then
    log "no apt source for Debian $codename found in /etc/apt; cannot fetch the $RUNTIME_SUITE runtime"
    exit 1
  fi
  echo "$mirror"
}

# Downloads the runtime packages with a private apt configuration and state
# (the host's sources and package database stay untouched; apt checks the
# archive signatures with the host's Debian keyring), then unpacks them.
fetch_runtime() {
  local apt_dir=$DIR/apt
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
  local mirror
  mirror=$(debian_mirror)
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $RUNTIME_SUITE main" \
    >"$apt_dir/sources.list"
  local options=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache"
    -o "APT::Sandbox::User=root"
  )
  log "downloading ${RUNTIME_PACKAGES[*]} from Debian $RUNTIME_SUITE"
  apt-get "${options[@]}" -qq update
  rm -f "$apt_dir/debs/"*.deb
  (cd "$apt_dir/debs" && apt-get "${options[@]}" -qq download "${RUNTIME_PACKAGES[@]}")
  rm -rf "$RUNTIME"
  local deb
  for deb in "$apt_dir/debs/"*.deb; do
    dpkg -x "$deb" "$RUNTIME"
  done
  rm -rf "$apt_dir"
}

# The launcher finds the binary relative to itself, so the repository may move.
write_launcher() {
  local relative=wheel/perf_analyzer/bin/perf_analyzer
  if glibc_at_least_2_38; then
    printf '#!/bin/sh\nhere=$(dirname "$(readlink -f "$0")")\nexec "$here/%s" "$@"\n' \
      "$relative" >"$LAUNCHER"
  else
    local libs=$RUNTIME/usr/lib/x86_64-linux-gnu missing
    missing=$("$libs/ld-linux-x86-64.so.2" --library-path "$libs" --list "$BINARY" | grep 'not found' || true)
    if [ -n "$missing" ]; then
      log "perf_analyzer still lacks shared libraries: $missing"
      exit 1
    fi
    printf '#!/bin/sh\nhere=$(dirname "$(readlink -f "$0")")\nlibs="$here/runtime/usr/lib/x86_64-linux-gnu"\nexec "$libs/ld-linux-x86-64.so.2" --library-path "$libs" "$here/%s" "$@"\n' \
      "$relative" >"$LAUNCHER"
  fi
  chmod +x "$LAUNCHER"
}

fetch_wheel
glibc_at_least_2_38 || fetch_runtime
write_launcher
"$LAUNCHER" --version >/dev/null
log "ready: $LAUNCHER"
