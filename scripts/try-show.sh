#!/usr/bin/env bash
# What a newcomer sees once the webhook is registered on a cluster (README, "Try it on your
# cluster"): a server dry run of examples/pods.yaml (the webhook's warnings, then its denial of
# the Deployment bad-share) and the node affinity it gives Pod ml/torch-infer (its placement).
# Nothing is created but the namespace `ml`; every apply is a dry run.
#
#   scripts/try-show.sh [KUBECONFIG]
#
# scripts/e2e-kind.sh --try runs it on its kind cluster; tests/e2e/test_e2e_try_show.py runs it
# on the real API server with `gpu-webhook serve --register-url` (path (b) of the README).
# Environment: KUBECTL (default kubectl), PYTHON (a Python with PyYAML: default the clone's
# .venv/bin/python, else python3, as after the README's `pip install .`).
set -euo pipefail
cd "$(dirname "$0")/.."

KUBECTL="${KUBECTL:-kubectl}"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
kubectl=("$KUBECTL")
if [[ -n "${1:-}" ]]; then kubectl+=(--kubeconfig "$1"); fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"${kubectl[@]}" create namespace ml --dry-run=client -o yaml | "${kubectl[@]}" apply -f - >/dev/null
echo "== kubectl apply --dry-run=server -f examples/pods.yaml (warnings, then the first denial):"
# The Deployment bad-share is denied: kubectl exits 1, which is the point here.
"${kubectl[@]}" apply --dry-run=server -f examples/pods.yaml 2>&1 || true
echo "== placement: the node affinity the webhook gives Pod ml/torch-infer (examples/pods.yaml):"
"$PYTHON" -c 'import sys, yaml; docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]; print(yaml.safe_dump(next(d for d in docs if d["metadata"]["name"] == "torch-infer")))' \
  examples/pods.yaml >"$WORK/torch-infer.yaml"
"${kubectl[@]}" create --dry-run=server -f "$WORK/torch-infer.yaml" \
  -o jsonpath='{.spec.affinity.nodeAffinity}{"\n"}'
