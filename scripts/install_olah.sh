#!/usr/bin/env bash
# Installs olah, the Hugging Face Hub mirror that harness/hub.py runs on
# loopback so the model-download tests need no Hub, into its own environment
# build/olah from requirements/olah.txt. Safe to run again: an environment
# installed from the same requirements file (its hash, stamped when the
# install finished) is kept as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=$PWD/build/olah
REQUIREMENTS=requirements/olah.txt

log() { printf 'install_olah: %s\n' "$*" >&2; }

wanted=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
if [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" = "$wanted" ]; then
  exit 0
fi

log "installing olah into $VENV"
# A stale or half-finished environment is replaced, not patched: the stamp
# is written last, so an interrupted install is installed again.
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir \
  -r "$REQUIREMENTS"
echo "$wanted" >"$VENV/.requirements.sha256"
