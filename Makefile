# One-command entry points. Every target creates/uses .venv and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint typecheck unit demo serve bench bench-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,fast]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check webhook tests bench scripts
	$(BIN)/ruff format --check webhook tests bench scripts
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q

# The README's test command: install, lint, type-check, run every test.
test: lint typecheck unit

# review exits 1 when something is denied: the third example is, on purpose, so the demo says
# so and ends with 0; any other failure still fails the target.
demo: $(STAMP)
	@$(BIN)/gpu-webhook review -f examples/pods.yaml --policies configmaps/; code=$$?; \
	if [ $$code -eq 1 ]; then \
	  echo; \
	  echo "demo: exit code 1 means \"something would be denied\", as expected here: the third"; \
	  echo "example (Deployment ml/bad-share) asks for vcuda-core 150, above one card (100) but"; \
	  echo "not a whole number of cards, so the webhook denies it. That is the demo working."; \
	else exit $$code; fi

# A local server listens on loopback only; HOST=0.0.0.0 make serve to expose it.
HOST ?= 127.0.0.1
serve: $(STAMP)
	$(BIN)/gpu-webhook serve --self-signed --policies configmaps/ --host $(HOST)

# The server benchmark's load generator (wrk, with LuaJIT) and instruction counter (perf), and
# the profiler; Debian packages need root.
bench-deps: $(STAMP)
	apt-get install -y wrk linux-perf
	$(BIN)/pip install --quiet -e '.[bench]'

bench: $(STAMP)
	$(BIN)/python bench/bench_eval.py
	$(BIN)/python bench/bench_server.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# e2e / e2e-kind targets (Helm chart, kind) live beside the chart tooling.
-include mk/deploy.mk
