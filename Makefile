# One-command entry points. Every target creates/uses .venv and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-real lint typecheck unit unit-compiled compiled docs docs-check reference demo serve bench bench-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,fast,docs]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check webhook tests bench scripts docs/conf.py setup.py
	$(BIN)/ruff format --check webhook tests bench scripts docs/conf.py setup.py
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# PYTEST_ARGS: more pytest arguments (`make test` passes a JUnit file and leaves out the suites
# that run against the real components in test-real).
PYTEST_ARGS ?=
unit: $(STAMP)
	$(BIN)/pytest -q $(PYTEST_ARGS)

# The evaluation core compiled with mypyc (setup.py lists the modules), beside a copy of the
# package in build/compiled: the source tree never holds a compiled module that could shadow an
# edited .py. Rebuilt when a source file changes. Needs a C compiler and the Python headers.
COMPILED_TREE := build/compiled
COMPILED_STAMP := $(COMPILED_TREE)/.built
$(COMPILED_STAMP): $(STAMP) setup.py $(shell find webhook -name '*.py' -o -name '*.yaml')
	rm -rf $(COMPILED_TREE) && mkdir -p $(COMPILED_TREE)
	cp -r webhook setup.py $(COMPILED_TREE)/
	find $(COMPILED_TREE) -name __pycache__ -prune -exec rm -rf {} +
	cd $(COMPILED_TREE) && GPU_WEBHOOK_COMPILE=1 $(abspath $(BIN))/python setup.py -q build_ext --inplace
	touch $@

compiled: $(COMPILED_STAMP)

# Every test again, with the compiled core imported instead of the source (tests/conftest.py
# checks that it is, and fails the run if not).
unit-compiled:
	@if ! command -v cc >/dev/null 2>&1; then \
	  echo "unit-compiled: SKIPPED: no C compiler (cc) to build the compiled core"; \
	else $(MAKE) --no-print-directory $(COMPILED_STAMP) && \
	  GPU_WEBHOOK_COMPILED=$(COMPILED_TREE) $(BIN)/pytest -q $(PYTEST_ARGS); fi

# The documentation site (docs/development/docs.md): Sphinx with MyST-Parser and Furo, into
# build/docs. Strict: any warning (a broken link or anchor, a missing page, a page in no
# toctree) fails it; -E reads every page afresh, so a warning of an unchanged page is never
# hidden by Sphinx's cache. The generated pages (docs/reference/*.md, the shipped-policies table
# of docs/concepts/policies.md) are committed: `make reference` rewrites them from the code, and
# the build fails when one is stale. Offline: nothing in docs/conf.py reaches the network.
# DOCS_SRC/DOCS_OUT let tests/docs build a small tree with the same configuration and flags.
SPHINX_STRICT := -W --keep-going -n -E -q
DOCS_SRC ?= docs
DOCS_OUT ?= build/docs
docs: $(STAMP)
	$(BIN)/sphinx-build -b html $(SPHINX_STRICT) -c docs $(DOCS_SRC) $(DOCS_OUT)
	@echo "docs: $(DOCS_OUT)/index.html"

docs-check: docs

reference: $(STAMP)
	$(BIN)/python -m scripts.docs_reference

# The suites against the real components (docs/development/tests.md): the e2e suite on the real
# kube-apiserver + kube-scheduler + kube-controller-manager, the real registry, the native
# policy differential; run when $(SHARED_DIR)/tools/prebuilt is there (CI has ../shared beside
# the clone), else skipped with the reason. scripts/test-real.sh says which ports and folders;
# REAL_SUITES=native (or e2e, registry) runs only those.
SHARED_DIR ?= ../shared
test-real: $(STAMP)
	SHARED_DIR=$(SHARED_DIR) PYTHON=$(BIN)/python bash scripts/test-real.sh

# The README's test command: install, lint, type-check, build the docs strict, then every suite
# (pure Python, with the compiled core, against the real components), each to the end even when
# one fails; one line per suite and, last, the total over all of them
# (`total: N passed, N failed, N skipped`). SUITES_DIR: where scripts/test_suites.py keeps count.
SUITES_DIR ?= build/suites
REAL_TESTS := --ignore=tests/e2e --ignore=tests/native --ignore=tests/integration/test_registry_real.py
SUITE := $(BIN)/python scripts/test_suites.py
test: lint typecheck docs-check
	@rm -rf $(SUITES_DIR) && mkdir -p $(SUITES_DIR); status=0; \
	$(SUITE) run $(SUITES_DIR) "unit (source)" --junit $(SUITES_DIR)/unit.xml --must-run -- \
	  $(MAKE) --no-print-directory unit PYTEST_ARGS="$(REAL_TESTS) --junitxml=$(SUITES_DIR)/unit.xml" \
	  || status=1; \
	$(SUITE) run $(SUITES_DIR) "unit (compiled core)" --junit $(SUITES_DIR)/compiled.xml -- \
	  $(MAKE) --no-print-directory unit-compiled \
	  PYTEST_ARGS="$(REAL_TESTS) --junitxml=$(SUITES_DIR)/compiled.xml" || status=1; \
	SUITES_DIR=$(abspath $(SUITES_DIR)) $(MAKE) --no-print-directory test-real || status=1; \
	$(SUITE) report $(SUITES_DIR) || status=1; \
	exit $$status

# The demo installs only what it runs: the package and its runtime dependencies into $(VENV),
# without the test, docs and fast extras or a pip upgrade (docs/guides/cli.md: 18-37 s from a
# fresh clone on 2 cores, most of it pip); `make install` (or any developer target) later adds
# the rest into the same $(VENV). A full install already made serves the demo as it is (and gets
# no demo stamp: the check runs each time, in no time). pip's output is shortened to one
# progress line per package, with the seconds since the start. --no-compile: pip byte-compiles
# nothing at install (the kubernetes client alone is thousands of modules the demo never
# imports); Python compiles what the demo imports when it first imports it.
DEMO_STAMP := $(VENV)/.demo-installed
$(DEMO_STAMP): pyproject.toml
	@if [ -f $(STAMP) ]; then exit 0; fi; \
	start=$$(date +%s); \
	echo "demo: [1/3] creating $(VENV) with $(PYTHON)"; \
	$(PYTHON) -m venv $(VENV) || exit 1; \
	echo "demo: [2/3] installing gpu-webhook and its runtime dependencies only (no test/docs extras)"; \
	{ $(BIN)/pip install --disable-pip-version-check --progress-bar off --no-compile -e . 2>&1; \
	  echo $$? >$(VENV)/.demo-pip-status; } | while IFS= read -r line; do case "$$line" in \
	    Collecting*|"Building editable"*|"Installing collected"*|ERROR*|error*) \
	      echo "demo:   $$(( $$(date +%s) - start )) s  $$line" | cut -c1-110;; esac; done; \
	[ "$$(cat $(VENV)/.demo-pip-status)" = 0 ] || { echo "demo: pip failed (above)"; exit 1; }; \
	echo "demo: installed in $$(( $$(date +%s) - start )) s"; \
	touch $@

# review exits 1 when something is denied: the third example is, on purpose, so the demo says
# so and ends with 0; any other failure still fails the target.
demo: $(DEMO_STAMP)
	@echo "demo: [3/3] gpu-webhook review -f examples/pods.yaml --policies configmaps/"; echo
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
	apt-get install -y wrk linux-perf gcc libssl-dev valgrind
	$(BIN)/pip install --quiet -e '.[bench]'

bench: $(STAMP)
	$(BIN)/python bench/bench_eval.py
	$(BIN)/python bench/bench_server.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build

# e2e / e2e-kind targets (Helm chart, kind) live beside the chart tooling.
-include mk/deploy.mk
