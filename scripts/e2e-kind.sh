#!/usr/bin/env bash
# End-to-end run on a throwaway kind cluster: build the image, load it into kind, install the
# chart (with the shipped policies), run tests/e2e against it. Needs docker, kind, and helm
# (or the dev venv's helm-python-sdk).
#
#   scripts/e2e-kind.sh --try   the same build, load and install, then instead of the tests:
#                               scripts/try-show.sh: what the webhook answers for
#                               examples/pods.yaml (a server dry run: the first denial, the
#                               warnings) and the node affinity it gives the first GPU pod (its
#                               placement), and keep the cluster (KEEP_CLUSTER=0 deletes it).
#                               Needs kubectl too. try-show.sh itself runs in CI on the real
#                               API server (tests/e2e/test_e2e_try_show.py).
#
# Not run in this project's CI: its machine has no container engine (no Docker daemon, no kind);
# tests/image/test_kind_try.py runs `--try` where both exist and is skipped, saying so, where
# not. Environment:
#   KIND_CLUSTER   cluster name (default gaw-e2e)           KEEP_CLUSTER=1  keep it afterwards
#   KIND_IMAGE     node image, e.g. kindest/node:v1.30.0 (default: kind's)
#   PYTHON         the dev venv's python (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."

TRY=0
if [[ "${1:-}" == "--try" ]]; then
  TRY=1
  KEEP_CLUSTER="${KEEP_CLUSTER:-1}"
fi

CLUSTER="${KIND_CLUSTER:-gaw-e2e}"
IMAGE="gpu-admission-webhook:e2e"
RELEASE="gaw"
NAMESPACE="gpu-admission-webhook"
PYTHON="${PYTHON:-.venv/bin/python}"
WORK="$(mktemp -d)"
KUBECONFIG_FILE="$WORK/kubeconfig"

need() { command -v "$1" >/dev/null 2>&1 || { echo "e2e-kind: $1 is required but not on PATH" >&2; exit 2; }; }
need docker
need kind
if [[ $TRY == 1 ]]; then need kubectl; fi

cleanup() {
  if [[ "${KEEP_CLUSTER:-0}" != "1" ]]; then
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  else
    echo "e2e-kind: kept cluster $CLUSTER (kubeconfig: kind get kubeconfig --name $CLUSTER)"
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" ${KIND_IMAGE:+--image "$KIND_IMAGE"} --wait 120s
fi
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG_FILE"

docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

values=(--set image.repository=gpu-admission-webhook --set image.tag=e2e
        --set image.pullPolicy=Never --set policies.install=true)
if command -v helm >/dev/null 2>&1; then
  helm upgrade --install "$RELEASE" charts/gpu-admission-webhook \
    --kubeconfig "$KUBECONFIG_FILE" --namespace "$NAMESPACE" --create-namespace \
    "${values[@]}" --wait --timeout 180s
else
  "$PYTHON" scripts/helm_install.py --kubeconfig "$KUBECONFIG_FILE" --namespace "$NAMESPACE" \
    --release "$RELEASE" "${values[@]}"
fi
kubectl --kubeconfig "$KUBECONFIG_FILE" -n "$NAMESPACE" rollout status "deployment/$RELEASE-gpu-admission-webhook" --timeout=180s 2>/dev/null \
  || "$PYTHON" - "$KUBECONFIG_FILE" "$NAMESPACE" <<'PY'
import sys, time
from kubernetes import client, config
api = config.new_client_from_config(config_file=sys.argv[1])
apps = client.AppsV1Api(api)
deadline = time.monotonic() + 180
while time.monotonic() < deadline:
    d = apps.read_namespaced_deployment("gaw-gpu-admission-webhook", sys.argv[2])
    if (d.status.ready_replicas or 0) >= (d.spec.replicas or 1):
        sys.exit(0)
    time.sleep(2)
sys.exit("the webhook deployment did not become ready in 180s")
PY

if [[ $TRY == 1 ]]; then
  PYTHON="$PYTHON" scripts/try-show.sh "$KUBECONFIG_FILE"
  echo "== kind cluster $CLUSTER keeps the webhook: KUBECONFIG=\$(kind get kubeconfig --name $CLUSTER)" \
    "then kubectl apply your own pods; remove it with: kind delete cluster --name $CLUSTER"
  exit 0
fi

E2E_KUBECONFIG="$KUBECONFIG_FILE" E2E_MODE=chart "$PYTHON" -m pytest -q tests/e2e -rs -p no:cacheprovider
