#!/usr/bin/env bash
# Builds Helm (pinned) with the Go toolchain into build/tools/bin/helm, which
# tests/test_helm_chart.py and harness/helm.py run. Safe to run again: a helm
# already there at the pinned version is kept as it is.
#
# No helm package exists for Debian 12 and no release archive is fetched: the
# Go module proxy serves Helm's source, and `go install` builds it. The
# ldflags set what Helm's own Makefile sets (its version, and the Kubernetes
# version its client libraries target, which `helm template` and `helm lint`
# assume for .Capabilities.KubeVersion); -s -w and -trimpath keep the link
# step and the binary small.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=v3.22.0
# Helm 3.22's go.mod requires k8s.io/client-go v0.37: Kubernetes 1.37.
K8S_MAJOR=1
K8S_MINOR=37

BIN=$PWD/build/tools/bin
HELM=$BIN/helm

log() { printf 'install_helm: %s\n' "$*" >&2; }

if [ -x "$HELM" ] && [ "$("$HELM" version --template '{{.Version}}' 2>/dev/null)" = "$VERSION" ]; then
  exit 0
fi

command -v go >/dev/null || {
  log "the Go toolchain is missing (apt-get install golang-go, or go.dev/dl) and re-run"
  exit 1
}

log "building helm $VERSION with $(go version | cut -d' ' -f3)"
mkdir -p "$BIN"
ldflags=(
  -s -w
  "-X helm.sh/helm/v3/internal/version.version=$VERSION"
  "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$K8S_MAJOR"
  "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$K8S_MINOR"
  "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$K8S_MAJOR"
  "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$K8S_MINOR"
)
. scripts/lib/go_build.sh
go_build_dir helm
GOBIN=$BIN go_logged go install -trimpath -ldflags="${ldflags[*]}" "helm.sh/helm/v3/cmd/helm@$VERSION"
"$HELM" version --template '{{.Version}}' | grep -qx "$VERSION" || {
  log "built $HELM, but it does not report $VERSION"
  exit 1
}
