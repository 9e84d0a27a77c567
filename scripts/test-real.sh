#!/usr/bin/env bash
# The suites against the real components (`make test-real`, part of `make test`): when the
# prebuilt binaries of shared/tools are beside the clone ($SHARED_DIR/tools/prebuilt; CI has
# ../shared), run
#   e2e (real control plane)   tests/e2e against kube-apiserver + kube-scheduler +
#                              kube-controller-manager 1.36.2 (scripts/e2e-kapi.sh with
#                              KAPI_CONTROLLERS=1; the scheduling tests must run)
#   registry (real registry)   tests/e2e/test_e2e_registry.py (E2E_REGISTRY=1 scripts/e2e-kapi.sh)
#                              and tests/integration/test_registry_real.py, against the CNCF
#                              distribution registry v3 on loopback
#   native policy (real API server)  tests/native: the exported native policies (CRLs, and
#                              GPU access control's validating and mutating ones) against the
#                              webhook core, on a bare kube-apiserver
# and fail when one of them could run and did not. Without the prebuilt folder each suite's
# tests are collected and skipped, saying why, and the run passes.
#
# Everything it starts lives in a temporary directory (KAPI_DIR, DISTRIBUTION_HOME: never
# ~/.cache) and is stopped on exit, whatever happens. Ports: KAPI_PORT, KAPI_ETCD_PORT (and +1),
# KAPI_SCHEDULER_PORT, KAPI_CM_PORT, WEBHOOK_PORT (and +1, +7) when set; else 15443, 15379,
# 15259, 15257, 15843 if free, else free ones the system picks. The registry takes a free port.
#
# Environment: SHARED_DIR (default ../shared), PYTHON (default .venv/bin/python),
# REAL_SUITES (default "e2e registry native": which of the three to run, e.g. REAL_SUITES=native),
# SUITES_DIR (where scripts/test_suites.py records the suites; default a temporary one, whose
# report is printed at the end; `make test` passes its own and reports once for everything).
set -uo pipefail
cd "$(dirname "$0")/.."

# Internal: the native suite's step, run by test_suites.py with the environment set below.
if [[ "${1:-}" == "__native" ]]; then
  bash "$KAPI_TOOLS/start.sh" --clean || exit 1
  code=0
  NATIVE_KUBECONFIG="$KAPI_DIR/kubeconfig" "$(dirname "$PYTHON")/pytest" -q -rs \
    -p no:cacheprovider tests/native --junitxml="$2" || code=$?
  bash "$KAPI_TOOLS/stop.sh" >/dev/null 2>&1
  exit $code
fi

SHARED_DIR="${SHARED_DIR:-../shared}"
PREBUILT="$SHARED_DIR/tools/prebuilt"
PYTHON="${PYTHON:-.venv/bin/python}"
BIN="$(dirname "$PYTHON")"
SUITE=("$PYTHON" scripts/test_suites.py)
E2E="e2e (real control plane)"
REGISTRY="registry (real registry)"
NATIVE="native policy (real API server)"

own_report=0
if [[ -z "${SUITES_DIR:-}" ]]; then
  SUITES_DIR="$(mktemp -d)"
  own_report=1
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gaw-test-real.XXXXXX")"
export KAPI_DIR="$WORK/kapi" DISTRIBUTION_HOME="$WORK/registry"
export NO_PROXY="127.0.0.1,localhost,::1${NO_PROXY:+,$NO_PROXY}" no_proxy="127.0.0.1,localhost,::1"

cleanup() {
  set +e
  # e2e-kapi.sh stops what it started; this stops what the native suite started, and anything
  # left by an interrupted run (stop.sh signals only the pids start.sh recorded in KAPI_DIR).
  if [[ -f "$SHARED_DIR/tools/kapi/stop.sh" && -d "$KAPI_DIR" ]]; then
    bash "$SHARED_DIR/tools/kapi/stop.sh" >/dev/null 2>&1
  fi
  rm -rf "$WORK"
  if [[ $own_report == 1 ]]; then rm -rf "$SUITES_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

status=0
junit() { echo "$SUITES_DIR/$1.xml"; }
REAL_SUITES="${REAL_SUITES:-e2e registry native}"
wanted() { [[ " $REAL_SUITES " == *" $1 "* ]]; }

if [[ ! -d "$PREBUILT" ]]; then
  why="no prebuilt Kubernetes and registry binaries at $PREBUILT (SHARED_DIR=$SHARED_DIR)"
  # Each suite's tests are still collected (they import), and skip saying why.
  if wanted e2e; then
    "${SUITE[@]}" skipped "$SUITES_DIR" "$E2E" "$why"
    "${SUITE[@]}" run "$SUITES_DIR" "$E2E" --junit "$(junit e2e)" -- \
      env -u E2E_KUBECONFIG "$BIN/pytest" -q -rs -p no:cacheprovider tests/e2e \
      --ignore=tests/e2e/test_e2e_registry.py --junitxml="$(junit e2e)" || status=1
  fi
  if wanted registry; then
    "${SUITE[@]}" skipped "$SUITES_DIR" "$REGISTRY" "$why"
    "${SUITE[@]}" run "$SUITES_DIR" "$REGISTRY" --junit "$(junit registry)" -- \
      env -u GPU_WEBHOOK_REGISTRY_BIN "$BIN/pytest" -q -rs -p no:cacheprovider \
      tests/e2e/test_e2e_registry.py tests/integration/test_registry_real.py \
      --junitxml="$(junit registry)" || status=1
  fi
  if wanted native; then
    "${SUITE[@]}" skipped "$SUITES_DIR" "$NATIVE" "$why"
    "${SUITE[@]}" run "$SUITES_DIR" "$NATIVE" --junit "$(junit native)" -- \
      env -u NATIVE_KUBECONFIG "$BIN/pytest" -q -rs -p no:cacheprovider tests/native \
      --junitxml="$(junit native)" || status=1
  fi
  if [[ $own_report == 1 ]]; then "${SUITE[@]}" report "$SUITES_DIR" || status=1; fi
  exit $status
fi

# A port: the one asked for if it (and the ports at the offsets after it) is free, else one the
# system picks whose offsets are free too.
pick_port() {
  "$PYTHON" - "$@" <<'PY'
import random, socket, sys
want, offsets = int(sys.argv[1]), [int(o) for o in sys.argv[2:]] or [0]
def free(port):
    for offset in offsets:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + offset))
            except OSError:
                return False
    return True
if free(want):
    print(want)
else:
    for _ in range(500):
        port = random.randint(20000, 60000)
        if free(port):
            print(port)
            break
    else:
        sys.exit("no free port")
PY
}
KAPI_PORT="${KAPI_PORT:-$(pick_port 15443)}"
KAPI_ETCD_PORT="${KAPI_ETCD_PORT:-$(pick_port 15379 0 1)}"
KAPI_SCHEDULER_PORT="${KAPI_SCHEDULER_PORT:-$(pick_port 15259)}"
KAPI_CM_PORT="${KAPI_CM_PORT:-$(pick_port 15257)}"
WEBHOOK_PORT="${WEBHOOK_PORT:-$(pick_port 15843 0 1 7)}"
export KAPI_PORT KAPI_ETCD_PORT KAPI_SCHEDULER_PORT KAPI_CM_PORT WEBHOOK_PORT
export KAPI_TOOLS="$SHARED_DIR/tools/kapi" PYTHON
echo "test-real: $PREBUILT into $WORK; API server 127.0.0.1:$KAPI_PORT, etcd $KAPI_ETCD_PORT," \
  "scheduler $KAPI_SCHEDULER_PORT, controller-manager $KAPI_CM_PORT, webhook $WEBHOOK_PORT"
started=$(date +%s)
if ! bash "$PREBUILT/install.sh"; then
  echo "test-real: $PREBUILT/install.sh failed" >&2
  status=1
fi
echo "test-real: binaries unpacked in $(($(date +%s) - started)) s"

# e2e on the whole control plane; the registry tests run in their own suite below.
if wanted e2e; then
  "${SUITE[@]}" run "$SUITES_DIR" "$E2E" --junit "$(junit e2e)" --must-run \
    --require tests/e2e/test_e2e_scheduling.py -- \
    env KAPI_CONTROLLERS=1 bash scripts/e2e-kapi.sh --ignore=tests/e2e/test_e2e_registry.py \
    --junitxml="$(junit e2e)" || status=1
fi

# GPU access control under enforce (SPEC §12): the same e2e cases through the chart's
# configurations with gpuAccess.mode enforce (the access entry then fails closed), on the API
# server alone (no binding is asserted there).
if wanted e2e; then
  printf 'gpuAccess:\n  mode: enforce\nregistryLookups:\n  publicRegistries: false\n' \
    >"$WORK/enforce.yaml"
  "${SUITE[@]}" run "$SUITES_DIR" "$E2E" --junit "$(junit e2e-enforce)" --must-run \
    --require tests/e2e/test_e2e_gpu_access.py -- \
    env E2E_CONFIG="$WORK/enforce.yaml" bash scripts/e2e-kapi.sh -k gpu_access \
    --junitxml="$(junit e2e-enforce)" || status=1
fi

# The registry end to end (the API server alone is enough), then the lookups of the registry
# client against the same registry binary, with Bearer-token auth.
if wanted registry; then
  "${SUITE[@]}" run "$SUITES_DIR" "$REGISTRY" --junit "$(junit registry-e2e)" --must-run \
    --require tests/e2e/test_e2e_registry.py -- \
    env E2E_REGISTRY=1 bash scripts/e2e-kapi.sh -k test_e2e_registry \
    --junitxml="$(junit registry-e2e)" || status=1
  "${SUITE[@]}" run "$SUITES_DIR" "$REGISTRY" --junit "$(junit registry-client)" --must-run \
    --require tests/integration/test_registry_real.py -- \
    env GPU_WEBHOOK_REGISTRY_BIN="$DISTRIBUTION_HOME/registry" "$BIN/pytest" -q -rs \
    -p no:cacheprovider tests/integration/test_registry_real.py \
    --junitxml="$(junit registry-client)" || status=1
fi

# The native-policy differential on a bare API server (no webhook registered, no controllers).
if wanted native; then
  "${SUITE[@]}" run "$SUITES_DIR" "$NATIVE" --junit "$(junit native)" --must-run \
    --require tests/native/test_native_differential.py \
    --require tests/native/test_native_access.py -- \
    bash scripts/test-real.sh __native "$(junit native)" || status=1
fi

if [[ $own_report == 1 ]]; then "${SUITE[@]}" report "$SUITES_DIR" || status=1; fi
exit $status
