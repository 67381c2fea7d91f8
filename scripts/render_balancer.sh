#!/usr/bin/env bash
# Prints the balancer's Envoy configuration for docker compose, rendered from
# the Helm chart's one source (deploy/helm/triton-embeddings/files/envoy.yaml):
# its endpoints the compose services named (default: triton), each on
# Triton's ports, 8000 (HTTP) and 8001 (gRPC), found by name (STRICT_DNS).
#
#   scripts/render_balancer.sh > docker/envoy.yaml                       # the committed one
#   scripts/render_balancer.sh triton triton-gpu1 > build/envoy-gpus.yaml # one server per GPU
#
# Needs .venv (helm and PyYAML; scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -gt 0 ] || set -- triton
endpoints=
for service in "$@"; do
  endpoints+="${endpoints:+,}{\"address\":\"$service\",\"httpPort\":8000,\"grpcPort\":8001}"
done

echo "# Rendered by scripts/render_balancer.sh $* from deploy/helm/triton-embeddings; do not edit."
.venv/bin/helm template emb deploy/helm/triton-embeddings \
  --show-only templates/balancer-configmap.yaml \
  --set-json "balancer.endpoints=[$endpoints]" |
  .venv/bin/python -c 'import sys, yaml; sys.stdout.write(yaml.safe_load(sys.stdin)["data"]["envoy.yaml"])'
