#!/usr/bin/env bash
# End-to-end run against a real kube-apiserver on loopback (no Docker, no kubelet): start the
# API server built by shared/tools/kapi, install the shipped policies, run `gpu-webhook serve`
# on 127.0.0.1 registered by URL, run tests/e2e in url mode, then clean up.
#
# Environment:
#   KAPI_TOOLS   the kapi tools folder (build.sh/start.sh/stop.sh); default ../shared/tools/kapi
#   KAPI_DIR     where build.sh put the binaries (default ~/.cache/kapi)
#   KAPI_PORT    API server port (default 6443)      WEBHOOK_PORT  webhook port (default 18443)
#   E2E_CONFIG   optional webhook config file (e.g. noCompatibleNode: deny); passed to both the
#                server (--config) and the tests (E2E_WEBHOOK_CONFIG). Default: public registry
#                lookups off (registryLookups.publicRegistries: false), so nothing leaves loopback
#   KAPI_CONTROLLERS=1  also run the real kube-scheduler and kube-controller-manager
#                (start.sh --controllers): Deployments/Jobs create pods, the scheduler binds them,
#                and tests/e2e/test_e2e_scheduling.py runs (it makes Nodes with node.sh and
#                starts one webhook per compatibility mode on WEBHOOK_PORT+7)
#   KAPI_ETCD_PORT, KAPI_SCHEDULER_PORT, KAPI_CM_PORT  passed on to start.sh (private instance)
#   KEEP_KAPI=1  leave the API server running afterwards
#   E2E_REGISTRY=1  also run the registry lookups end to end (tests/e2e/test_e2e_registry.py):
#                start the CNCF registry (~/.cache/registry/registry, built by
#                ../shared/tools/registry/build.sh) on 127.0.0.1:<free port> with TLS, push the
#                images of tests/e2e/registryimages.py (normal and hostile), and run the webhook
#                with that registry in registryLookups.allowedRegistries, its CA as --registry-ca
#                and /metrics, /images on METRICS_PORT (default WEBHOOK_PORT+1)
#   PYTHON       the dev venv's python (default .venv/bin/python)
# Extra arguments go to pytest (e.g. -k kueue).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="${KAPI_TOOLS:-../shared/tools/kapi}"
KAPI_DIR="${KAPI_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kapi}"
export KAPI_DIR
PYTHON="${PYTHON:-.venv/bin/python}"
BIN="$(dirname "$PYTHON")"
PORT="${WEBHOOK_PORT:-18443}"
WORK="$(mktemp -d)"
# Loopback traffic never goes through a proxy.
export NO_PROXY="127.0.0.1,localhost,::1${NO_PROXY:+,$NO_PROXY}" no_proxy="127.0.0.1,localhost,::1"

if [[ ! -x "$KAPI_DIR/bin/kube-apiserver" || ! -f "$TOOLS/start.sh" ]]; then
  echo "e2e-kapi: no kube-apiserver at $KAPI_DIR/bin (or no $TOOLS/start.sh)." >&2
  echo "  Build it once (~10 min): $TOOLS/build.sh MICROSHIFT_GIT_DIR (see its README)." >&2
  exit 2
fi

server_pid=""
REGISTRY_PID=""
cleanup() {
  set +e
  "$BIN/python" scripts/register-webhook-url.py --delete --kubeconfig "$KUBECONFIG" >/dev/null 2>&1
  [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  [[ -n "$REGISTRY_PID" ]] && kill "$REGISTRY_PID" 2>/dev/null
  [[ "${KEEP_KAPI:-0}" == "1" ]] || bash "$TOOLS/stop.sh" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

start_args=(--clean)
if [[ "${KAPI_CONTROLLERS:-0}" == "1" ]]; then
  if [[ ! -x "$KAPI_DIR/bin/kube-scheduler" || ! -x "$KAPI_DIR/bin/kube-controller-manager" ]]; then
    echo "e2e-kapi: KAPI_CONTROLLERS=1 needs kube-scheduler and kube-controller-manager in" \
      "$KAPI_DIR/bin ($TOOLS/build.sh builds them)." >&2
    exit 2
  fi
  start_args+=(--controllers)
  # The scheduling tests: node.sh (with kubectl from the kapi bin) and a port for their webhooks.
  export E2E_SCHEDULER=1 E2E_KAPI_TOOLS="$(cd "$TOOLS" && pwd)" E2E_KAPI_BIN="$KAPI_DIR/bin"
  export E2E_WEBHOOK_PORT="$PORT"
fi
bash "$TOOLS/start.sh" "${start_args[@]}"
export KUBECONFIG="$KAPI_DIR/kubeconfig"
# The shipped policies into kube-public (the etcd is fresh: create; no kubectl needed).
"$BIN/python" - <<'PY'
import pathlib, yaml
from kubernetes import client, config
api = client.CoreV1Api(config.new_client_from_config())
for path in sorted(pathlib.Path("configmaps").glob("*.yaml")):
    for doc in yaml.safe_load_all(path.read_text()):
        if doc:
            api.create_namespaced_config_map(doc["metadata"].get("namespace", "kube-public"), doc)
PY

# e2e traffic stays on loopback: by default the webhook asks no public registry (not even
# DNS) about an image nothing else knows; it warns at once instead, as in an air-gapped cluster.
if [[ -z "${E2E_CONFIG:-}" ]]; then
  E2E_CONFIG="$WORK/config.yaml"
  printf 'registryLookups:\n  publicRegistries: false\n' >"$E2E_CONFIG"
fi
extra_args=()
if [[ "${E2E_REGISTRY:-0}" == "1" ]]; then
  # The registry on loopback with the test images (exit 2, saying why, without its binary).
  "$BIN/python" scripts/e2e-registry.py "$WORK/registry"
  # shellcheck disable=SC1091
  source "$WORK/registry/registry.env"
  METRICS_PORT="${METRICS_PORT:-$((PORT + 1))}"
  # The run's config plus: that registry allowed (a loopback address must be listed), public
  # registries never asked, and a 3 s budget: the registry itself takes ~1.2 s to serve the
  # 4 MiB index of empty objects (it parses it), which the 2 s default leaves little room for.
  "$BIN/python" - "$E2E_CONFIG" "$WORK/config-registry.yaml" "$REGISTRY_HOST" <<'PY'
import pathlib, sys, yaml
source, target, host = sys.argv[1:]
config = yaml.safe_load(pathlib.Path(source).read_text()) or {}
lookups = config.setdefault("registryLookups", {})
lookups["publicRegistries"] = False
lookups["allowedRegistries"] = [*lookups.get("allowedRegistries", []), host]
lookups.setdefault("budgetSeconds", 3.0)
pathlib.Path(target).write_text(yaml.safe_dump(config))
PY
  E2E_CONFIG="$WORK/config-registry.yaml"
  extra_args=(--registry-ca "$REGISTRY_CA" --metrics-port "$METRICS_PORT")
  export E2E_REGISTRY_HOST="$REGISTRY_HOST" E2E_WEBHOOK_METRICS_URL="http://127.0.0.1:$METRICS_PORT"
fi
config_args=(--config "$E2E_CONFIG")
export E2E_WEBHOOK_CONFIG="$E2E_CONFIG"
"$BIN/gpu-webhook" serve --self-signed --cert-dir "$WORK" --host 127.0.0.1 --port "$PORT" \
  --kubeconfig "$KUBECONFIG" --log-format text --log-level warning "${config_args[@]}" \
  "${extra_args[@]}" >"$WORK/webhook.log" 2>&1 &
server_pid=$!

# Ready: policies and the first Node list (SPEC §4), answered over TLS with the throwaway CA.
for _ in $(seq 1 120); do
  if curl -fsS --cacert "$WORK/ca.crt" "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; then
    break
  fi
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "e2e-kapi: the webhook exited:" >&2; cat "$WORK/webhook.log" >&2; exit 1
  fi
  sleep 0.5
done
"$BIN/python" scripts/register-webhook-url.py --url "https://127.0.0.1:$PORT" \
  --ca-file "$WORK/ca.crt" --kubeconfig "$KUBECONFIG" --config "$E2E_CONFIG"

status=0
E2E_WEBHOOK_URL="https://127.0.0.1:$PORT" E2E_WEBHOOK_CA="$WORK/ca.crt" \
E2E_KUBECONFIG="$KUBECONFIG" E2E_MODE=url "$BIN/pytest" -q tests/e2e -rs -p no:cacheprovider "$@" \
  || status=$?
if [[ $status -ne 0 ]]; then
  echo "e2e-kapi: webhook log ($WORK/webhook.log):" >&2
  tail -n 50 "$WORK/webhook.log" >&2
fi
exit $status
