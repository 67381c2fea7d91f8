#!/usr/bin/env bash
# Installs what tests/test_compose_cpu.py runs the compose cpu profile with:
# podman, runc, catatonit (compose's `init: true`), netavark, aardvark-dns
# and iptables (the networks of builds and of compose, its service names, its
# published ports) and debootstrap (the offline base image) from Debian, and
# podman-compose in its own environment build/podman-compose. Safe to run
# again: what is there is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=$PWD/build/podman-compose
REQUIREMENTS=requirements/podman-compose.txt

log() { printf 'install_podman: %s\n' "$*" >&2; }

missing=()
command -v podman >/dev/null || missing+=(podman)
command -v runc >/dev/null || missing+=(runc)
[ -x /usr/libexec/podman/catatonit ] || missing+=(catatonit)
[ -x /usr/lib/podman/netavark ] || missing+=(netavark)
[ -x /usr/lib/podman/aardvark-dns ] || missing+=(aardvark-dns)
command -v iptables >/dev/null || missing+=(iptables)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    log "missing system packages: ${missing[*]}; install them (apt-get install ${missing[*]}) and re-run"
    exit 1
  fi
  log "installing system packages: ${missing[*]}"
  apt-get update -qq
  # Without recommends: buildah, fuse-overlayfs and slirp4netns serve
  # rootless podman, which the test does not use.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

wanted=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
if [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$wanted" ]; then
  log "installing podman-compose into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
  echo "$wanted" >"$VENV/.requirements.sha256"
fi
