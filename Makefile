# cdriver developer targets. `make demo` runs the local simulated cluster; `make test` the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: venv control-plane peer test unit integration e2e lint typecheck protos binary demo bench clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

control-plane:
	hack/kube/build.sh all

# the upstream Go ComputeDomain driver, built from its source tarball (side-by-side runs)
peer:
	hack/peer/build.sh

test: lint control-plane
	$(BIN)/pytest -q $(PYTEST_ARGS)

unit: venv
	$(BIN)/pytest -q -m unit $(PYTEST_ARGS)

integration: venv control-plane
	$(BIN)/pytest -q -m integration $(PYTEST_ARGS)

e2e: venv control-plane
	$(BIN)/pytest -q -m e2e $(PYTEST_ARGS)

# ruff, the layering rules in .importlinter (roles and sim independent, sim layered, kube below api),
# then the type check.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

typecheck: venv
	$(BIN)/mypy

protos: venv
	$(BIN)/python hack/codegen.py

binary: venv
	PYINSTALLER=$(BIN)/pyinstaller packaging/build.sh

demo: venv control-plane
	$(BIN)/cdriver sim demo

bench: venv control-plane peer
	$(BIN)/pip install -q -e '.[dev,bench]'
	@for b in $(filter-out bench/report.py,$(wildcard bench/*.py)); do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf build dist .pytest_cache .ruff_cache .mypy_cache *.egg-info
