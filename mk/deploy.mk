# Deployment targets (included from the Makefile): image, chart sync, end-to-end tests.
IMAGE ?= gpu-admission-webhook:dev

.PHONY: image chart-sync chart-check e2e e2e-kind e2e-kapi

# Build the container image (needs docker).
image:
	docker build -t $(IMAGE) .

# Copy configmaps/ into the chart and regenerate the config part of values.schema.json.
chart-sync: $(STAMP)
	cp configmaps/*.yaml charts/gpu-admission-webhook/policies/
	$(BIN)/python scripts/sync_chart_schema.py
	$(BIN)/python scripts/sync_native_policy.py

# Render and schema-check the chart (also part of `make test`).
chart-check: $(STAMP)
	$(BIN)/pytest -q tests/chart

# End-to-end tests against the cluster in E2E_KUBECONFIG (skipped, with the reason, without it).
# E2E_MODE=chart (webhook installed by the chart) or url (scripts/register-webhook-url.py).
e2e: $(STAMP)
	$(BIN)/pytest -q tests/e2e -rs -p no:cacheprovider

# kind create cluster, docker build, kind load docker-image, helm install, run tests/e2e.
e2e-kind: $(STAMP)
	PYTHON=$(BIN)/python scripts/e2e-kind.sh

# The real kube-apiserver of shared/tools/kapi on loopback, the webhook registered by URL,
# tests/e2e in url mode (KAPI_TOOLS, KAPI_DIR, E2E_CONFIG: see the script).
e2e-kapi: $(STAMP)
	PYTHON=$(BIN)/python scripts/e2e-kapi.sh
