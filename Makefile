# One-command entry points. Every target creates/uses .venv and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint typecheck unit demo serve bench clean

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

demo: $(STAMP)
	@# Exit 1 is expected: the third example is denied on purpose.
	-$(BIN)/gpu-webhook review -f examples/pods.yaml --policies configmaps/

serve: $(STAMP)
	$(BIN)/gpu-webhook serve --self-signed --policies configmaps/

bench: $(STAMP)
	$(BIN)/python bench/bench_eval.py
	$(BIN)/python bench/bench_server.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# e2e / e2e-kind targets (Helm chart, kind) live beside the chart tooling.
-include mk/deploy.mk
