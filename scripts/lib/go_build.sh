# Sourced by the installer that builds a Go tool from the module proxy
# (install_jaeger.sh).
#
# go_build_dir NAME: a throwaway folder GO_BUILD beside build/tools/bin,
# removed when the installer exits, that holds Go's module and build caches
# too: a set-up leaves no Go cache behind (3.9 GiB when Helm was built here
# too, Debian 12, 2026-11-27), at the price of fetching and compiling again
# when a pinned version changes.
go_build_dir() {
  mkdir -p build/tools
  GO_BUILD=$(mktemp -d "$PWD/build/tools/$1-build.XXXXXX")
  trap 'rm -rf "$GO_BUILD"' EXIT
  # -modcacherw: the module cache is written writable, so rm removes it.
  export GOMODCACHE=$GO_BUILD/mod GOCACHE=$GO_BUILD/cache
  export GOFLAGS="-buildvcs=false -modcacherw"
}

# go_logged COMMAND...: runs it with its output (a line per module fetched,
# hundreds) in GO_BUILD's log, shown only when it fails.
go_logged() {
  "$@" >>"$GO_BUILD/go.log" 2>&1 || {
    local status=$?
    tail -n 40 "$GO_BUILD/go.log" >&2
    return "$status"
  }
}
