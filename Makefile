# uds-vm-operator: every entry point a developer or CI needs. `make help` lists them.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ENVTEST_DIR := .envtest
KUBECONFIG_OUT := $(ENVTEST_DIR)/kubeconfig

.DEFAULT_GOAL := help
.PHONY: help install system-deps envtest-bins helm-bin zarf-schema zarf-build deploy-check compliance-check \
        crds crds-check lint typecheck test test-unit test-images \
        test-integration bench demo cluster-up cluster-down clean \
        image-deps image-registry image-registry-down base-images image lock lock-check provenance-bins test-build test-floors

help: ## show this help
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v python3 >/dev/null || { echo "error: python3 (>= 3.11) is required" >&2; exit 1; }
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(STAMP) ## create .venv and install the package with its dev tools

system-deps: ## install the reference tools the test tiers need (qemu-img, openssl) if missing
	@tools/ensure-system-deps.sh

envtest-bins: install ## build (or reuse) kube-apiserver, kube-controller-manager, etcd and the upstream CRDs in ~/.cache/uds-vm-operator
	@tools/envtest/build.sh >/dev/null
	@$(PY) tools/envtest/fetch_crds.py >/dev/null

crds: install ## regenerate the CRDs under deploy/crds from the pydantic models
	$(PY) -m uds_vm_operator.api.crdgen deploy/crds

crds-check: install ## fail if deploy/crds differs from what the models generate
	$(PY) -m uds_vm_operator.api.crdgen --check deploy/crds

lint: install ## ruff (lint + format check) and mypy --strict
	$(VENV)/bin/ruff check src tests tools bench
	$(VENV)/bin/ruff format --check src tests tools bench
	$(VENV)/bin/mypy src

helm-bin: ## build (or reuse) helm from its Go module into ~/.cache/uds-vm-operator
	@tools/helm/build.sh >/dev/null

zarf-schema: ## fetch (or reuse) Zarf's upstream zarf.schema.json from its Go module
	@tools/zarf/fetch-schema.sh >/dev/null

zarf-build: ## build the Zarf package where a zarf CLI can be built here (says why not otherwise)
	tools/zarf/build.sh

deploy-check: install ## fail if deploy/ differs from what the Helm chart renders
	$(PY) tools/deploy/render.py --check

compliance-check: install ## fail if compliance/oscal-component.yaml differs from the validations it is built from
	$(PY) -m uds_vm_operator.compliance.component --check compliance/oscal-component.yaml

test: install system-deps envtest-bins helm-bin zarf-schema lint crds-check deploy-check compliance-check lock-check image provenance-bins test-floors ## install everything, then run every test tier
	$(PY) -m pytest -q tests

test-unit: install ## unit tier only (fast)
	$(PY) -m pytest -q tests/unit

test-images: install system-deps ## image tier only (needs qemu-img)
	$(PY) -m pytest -q tests/images

test-integration: install envtest-bins ## integration tier only (real control plane)
	$(PY) -m pytest -q tests/integration

bench: install system-deps envtest-bins ## run the benchmarks; JSON results land in bench/results/
	$(PY) -m bench.run

cluster-up: install envtest-bins ## start the local control plane in the background; writes .envtest/kubeconfig
	$(PY) tools/envtest/controlplane.py up --state-dir $(ENVTEST_DIR)

cluster-down: ## stop the local control plane (by recorded PIDs only)
	@if [ -x $(PY) ]; then $(PY) tools/envtest/controlplane.py down --state-dir $(ENVTEST_DIR); fi

demo: install envtest-bins ## the main job: control plane + CRDs + operator + a sample VM reconciled to Ready
	$(PY) tools/demo.py

clean: cluster-down ## remove the virtualenv and local state (the binary cache in ~/.cache stays)
	rm -rf $(VENV) $(ENVTEST_DIR) .mypy_cache .ruff_cache .pytest_cache

# --- Images and provenance (tools/images, tools/provenance; issue 14 item 3, issue 20 item 2) ---
image-deps: ## install the Debian packages the image builds need (buildah, mmdebstrap, gcc, busybox-static, docker-registry)
	@tools/images/ensure-deps.sh

image-registry: image-deps ## reuse .envtest/registry if it answers, else start a loopback docker-registry
	@tools/images/registry.sh up >/dev/null

image-registry-down: ## stop the registry tools/images/registry.sh started (by its recorded PID)
	@tools/images/registry.sh down

base-images: image-deps image-registry envtest-bins ## python base, pause and busybox images from Debian packages (cached), pushed
	@tools/images/base.sh

image: install image-deps image-registry envtest-bins lock-check ## build the operator image offline (buildah), push it, write .envtest/operator-image
	@tools/images/image.sh >/dev/null

lock: install ## regenerate requirements.lock and requirements-build.lock with hashes (needs PyPI)
	$(PY) tools/images/lock.py compile

lock-check: install ## fail if requirements.lock drifted from pyproject.toml's runtime dependencies
	$(PY) tools/images/lock.py check

provenance-bins: ## build (or reuse) cosign and syft from their Go modules into ~/.cache/uds-vm-operator
	@tools/cosign/build.sh >/dev/null && tools/syft/build.sh >/dev/null

test-build: image provenance-bins ## build tier only: the operator image from inside, its signature and SBOM
	$(PY) -m pytest -q tests/build

test-floors: install ## the unit tier on the floor versions of the runtime dependencies (throwaway venv)
	$(PY) tools/deps/floors.py
