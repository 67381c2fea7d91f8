#!/usr/bin/env bash
# Builds Jaeger (pinned; Apache-2.0) with the Go toolchain into
# build/tools/bin/jaeger, the OpenTelemetry collector and trace store that
# tests/test_tracing.py runs (harness/jaeger.py). Safe to run again: a
# jaeger already there, built from the pinned version, is kept as it is.
#
# cmd/jaeger is Jaeger v2: one binary, an all-in-one without a config (OTLP
# on 4317/4318, the query API and UI on 16686). No release archive is
# fetched: the Go module proxy serves Jaeger's source. Its go.mod has
# replace directives, which `go install module@version` refuses, so it is
# built as a tool of a throwaway module (`go get -tool`, `go install tool`),
# which reads Jaeger's requirements without its replacements.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=v1.76.0
MODULE=github.com/jaegertracing/jaeger

BIN=$PWD/build/tools/bin
JAEGER=$BIN/jaeger

log() { printf 'install_jaeger: %s\n' "$*" >&2; }

# The Jaeger module version a binary was built from, from its build info.
built_version() {
  go version -m "$1" 2>/dev/null |
    awk -v module="$MODULE" '($1 == "mod" || $1 == "dep") && $2 == module { print $3 }'
}

if [ -x "$JAEGER" ]; then
  # Without Go its build info cannot be read, nor a new one built: keep it.
  command -v go >/dev/null || exit 0
  [ "$(built_version "$JAEGER")" != "$VERSION" ] || exit 0
fi

command -v go >/dev/null || {
  log "the Go toolchain is missing (apt-get install golang-go, or go.dev/dl) and re-run"
  exit 1
}

log "building jaeger $VERSION with $(go version | cut -d' ' -f3) (a few minutes)"
mkdir -p "$BIN"
# Built in the throwaway folder beside the final path and moved there: the
# move is a rename, so an interrupted build never leaves a half-written
# jaeger that the check above would take.
. scripts/lib/go_build.sh
go_build_dir jaeger
(
  mkdir "$GO_BUILD/module"
  cd "$GO_BUILD/module"
  go_logged go mod init jaeger-build
  go_logged go get -tool "$MODULE/cmd/jaeger@$VERSION"
  GOBIN=$GO_BUILD/bin go_logged go install -trimpath -ldflags="-s -w" tool
)
mv "$GO_BUILD/bin/jaeger" "$JAEGER"
[ "$(built_version "$JAEGER")" = "$VERSION" ] || {
  log "built $JAEGER, but its build info does not name $MODULE $VERSION"
  exit 1
}
