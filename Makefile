# uds-vm-operator: every entry point a developer or CI needs. `make help` lists them.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ENVTEST_DIR := .envtest
KUBECONFIG_OUT := $(ENVTEST_DIR)/kubeconfig

.DEFAULT_GOAL := help
.PHONY: help install system-deps envtest-bins helm-bin zarf-schema zarf-bin zarf-build zarf-init-package deploy-check compliance-check \
        crds crds-check lint typecheck test test-unit test-images \
        test-integration test-node bench demo cluster-up cluster-down node-deps node-bins node-up node-down clean \
        guest-deps guest-image tiny-guest-image \
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
	@$(PY) -m tools.envtest.fetch_crds >/dev/null

crds: install ## regenerate the CRDs under deploy/crds from the pydantic models
	$(PY) -m uds_vm_operator.api.crdgen deploy/crds

crds-check: install ## fail if deploy/crds differs from what the models generate
	$(PY) -m uds_vm_operator.api.crdgen --check deploy/crds

lint: install ## ruff (lint + format check) and mypy --strict
	$(VENV)/bin/ruff check src tests tools bench release
	$(VENV)/bin/ruff format --check src tests tools bench release
	$(VENV)/bin/mypy src

helm-bin: ## build (or reuse) helm from its Go module into ~/.cache/uds-vm-operator
	@tools/helm/build.sh >/dev/null

zarf-schema: ## fetch (or reuse) Zarf's upstream zarf.schema.json from its Go module
	@tools/zarf/fetch-schema.sh >/dev/null

zarf-bin: ## build (or reuse) the zarf CLI from its Go module into ~/.cache/uds-vm-operator (long when cold)
	@tools/zarf/build.sh >/dev/null

zarf-build: install image-deps image-registry envtest-bins lock-check zarf-bin ## the Zarf package out/zarf-package-*.tar.zst (operator image built offline, SBOMs by Zarf)
	@tools/zarf/package.sh

zarf-init-package: install image-deps image-registry zarf-bin ## Zarf's init package from the module's init definition (agent image built here)
	@tools/zarf/init-package.sh

deploy-check: install ## fail if deploy/ differs from what the Helm chart renders
	$(PY) -m release.deploy_manifests --check

compliance-check: install ## fail if compliance/oscal-component.yaml differs from the validations it is built from
	$(PY) -m uds_vm_operator.compliance.component --check compliance/oscal-component.yaml

node-deps: ## install the real node's Debian packages (containerd, runc, CNI plugins, iptables, ipset, docker-registry, buildah)
	@tools/node/ensure-deps.sh

node-bins: envtest-bins ## build (or reuse) kubelet, kube-scheduler, kube-proxy, CoreDNS and kube-router in ~/.cache/uds-vm-operator
	@tools/node/build.sh >/dev/null

node-up: install node-deps node-bins ## add one real node to the control plane (starts the plane first if needed); idempotent
	$(PY) -m tools.node.node up --state-dir $(ENVTEST_DIR)

node-down: ## stop the real node and remove everything it made (processes, mounts, veths, bridge, loop devices, iptables)
	@if [ -x $(PY) ]; then $(PY) -m tools.node.node down --state-dir $(ENVTEST_DIR); fi

# `make test` prepares in three phases, because cold CI on two cores depends on it:
#  1. the Debian packages, one script after another (apt and dpkg take one lock);
#  2. every build and download the node tier needs at once (TEST_JOBS): Go builds, mmdebstrap images and module
#     downloads overlap, and the chains that share Go build cache entries stay in order (envtest-bins before
#     node-bins, cdi-bins before cdi-images);
#  3. tools/run_test_tiers.py: the node tier, and beside it the other tiers' builds, the checks (lint, generated-file
#     drift, the dependency floors, the chart scan), then every other tier.
TEST_JOBS ?= 3
.PHONY: test-packages test-builds node-tier-builds other-tier-builds test-checks
test-packages: system-deps node-deps guest-deps image-deps ## the Debian packages every test tier needs (one after another)

test-builds: node-tier-builds other-tier-builds ## every build the test tiers need

node-tier-builds: envtest-bins node-bins kubevirt-images helm-bin zarf-schema zarf-bin guest-image tiny-guest-image cdi-images prometheus-image provenance-bins s3-bin ## what `make test` builds (in parallel) before the node tier starts

other-tier-builds: go-anchor scan-bins ## built by `make test` beside the node tier, before the checks and the other tiers (tools/run_test_tiers.py)

test-checks: lint crds-check deploy-check compliance-check lock-check test-floors chart-scan ## static checks and generated-file drift

test: install ## install everything, build what the node tier needs (in parallel), then the node tier beside the other builds, the checks and the other tiers
	@$(MAKE) --no-print-directory test-packages
	@echo "make test: building with -j$(TEST_JOBS) (each build's log appears when it ends)"
	@$(PY) -m tools.build_progress --every 30 -- $(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target node-tier-builds
	$(PY) -m tools.run_test_tiers

guest-deps: ## install the Debian packages the guest tier needs (QEMU, mmdebstrap, syslinux, xorriso, cloud-init)
	@tools/guest/ensure-deps.sh

guest-image: install guest-deps ## build (or reuse) the Debian guest image into .envtest/guest (cached by input hash)
	@tools/guest/image.sh >/dev/null

tiny-guest-image: guest-deps ## build (or reuse) the tiny test guest (kernel + busybox, dropbear, qemu-guest-agent) into .envtest/guest
	@tools/guest/tiny-image.sh >/dev/null

test-guest: install envtest-bins guest-image tiny-guest-image ## guest tier only (boots Debian guests under QEMU)
	$(PY) -m pytest -q tests/guest

test-unit: install ## unit tier only (fast)
	$(PY) -m pytest -q tests/unit

test-images: install system-deps ## image tier only (needs qemu-img)
	$(PY) -m pytest -q tests/images

test-integration: install envtest-bins helm-bin scan-bins go-anchor ## integration tier only (real control plane; the Go anchor smoke test)
	$(PY) -m pytest -q tests/integration

test-node: install node-deps node-bins kubevirt-images guest-image tiny-guest-image prometheus-image helm-bin zarf-bin ## real-node tier only (kubelet, containerd, CNI, policies, the operator's image)
	$(PY) -m pytest -q tests/node

bench: install system-deps envtest-bins go-anchor guest-image ## run the benchmarks; JSON results land in bench/results/
	$(PY) -m bench.run

cluster-up: install envtest-bins ## start the local control plane in the background; writes .envtest/kubeconfig
	$(PY) -m tools.envtest.controlplane up --state-dir $(ENVTEST_DIR)

cluster-down: ## stop the real node (if any) and the local control plane, by recorded PIDs only
	@if [ -x $(PY) ]; then $(PY) -m tools.node.node down --with-plane --state-dir $(ENVTEST_DIR); \
	  $(PY) -m tools.envtest.controlplane down --state-dir $(ENVTEST_DIR); fi

demo: install ## the main job, all real: a Debian image prepped, uploaded through CDI, verified, booted by KubeVirt, hardened, isolated, assessed
	@$(MAKE) --no-print-directory test-packages
	@echo "make demo: building with -j$(TEST_JOBS) (warm: only checks; cold: the Go builds and images, progress below)"
	@$(PY) -m tools.build_progress --every 30 -- $(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=line demo-builds
	$(PY) -m tools.demo $(DEMO_ARGS)

.PHONY: demo-builds
demo-builds: envtest-bins node-bins helm-bin kubevirt-images cdi-images guest-image ## every build the demo needs (run in parallel by `make demo`, as `make test` runs node-tier-builds)

# --- Real CDI on the real node (issue 15; tools/cdi, ADR 0007) ---
.PHONY: cdi-bins cdi-images cdi-up cdi-down test-cdi-images
cdi-bins: ## build (or reuse) CDI's binaries from its Go module into ~/.cache/uds-vm-operator
	@tools/cdi/build.sh >/dev/null

cdi-images: cdi-bins ## build (or reuse) CDI's Debian-based images as OCI archives in ~/.cache/uds-vm-operator
	@tools/cdi/images.sh >/dev/null

test-cdi-images: install system-deps cdi-images ## CDI's importer run inside our worker images (no cluster)
	$(PY) -m pytest -q tests/cdi_images

cdi-up: install cdi-images node-up ## install the real CDI (cdi-operator + CDI resource) on the real node; idempotent
	$(PY) -m tools.cdi.install --state-dir $(ENVTEST_DIR)

cdi-down: install ## uninstall the real CDI (its operator removes its workloads); the plane gets CDI's CRDs back
	$(PY) -m tools.cdi.install --state-dir $(ENVTEST_DIR) --down

clean: cluster-down ## remove the virtualenv and local state (the binary cache in ~/.cache stays)
	rm -rf $(VENV) $(ENVTEST_DIR) .mypy_cache .ruff_cache .pytest_cache

# ---- Real KubeVirt on the test node (issue 16, ADR 0008) --------------------------------------------------------
.PHONY: kubevirt-bins kubevirt-images kubevirt-up
kubevirt-bins: ## build (or reuse) KubeVirt (KUBEVIRT_VERSION): virt-api, virt-controller; the node half in a trixie root
	@tools/kubevirt/build.sh >/dev/null
	@tools/kubevirt/build-node.sh >/dev/null

kubevirt-images: image-deps kubevirt-bins ## their images as OCI archives (launcher, handler: trixie); pushed into the node's registry when it runs
	@tools/kubevirt/images.sh $(ENVTEST_DIR) >/dev/null

kubevirt-up: node-up kubevirt-images ## the whole KubeVirt on the node: virt-api, virt-controller, virt-handler (guests boot under TCG); idempotent
	@tools/kubevirt/images.sh $(ENVTEST_DIR) >/dev/null
	$(PY) -m tools.kubevirt.kubevirt_install up --state-dir $(ENVTEST_DIR)

# --- A real Prometheus for the node tier (tools/prometheus): Debian's package, scraping guests through their policies ---
.PHONY: prometheus-image s3-bin
prometheus-image: image-deps ## build (or reuse) Debian bookworm's prometheus as an OCI archive in ~/.cache/uds-vm-operator; node tests push it
	@tools/prometheus/image.sh >/dev/null

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
	$(PY) -m release.locks compile

lock-check: install ## fail if requirements.lock drifted from pyproject.toml's runtime dependencies
	$(PY) -m release.locks check

s3-bin: ## build (or reuse) the Versity S3 gateway (the backup tests' object store, ADR 0020) into ~/.cache/uds-vm-operator
	@tools/s3/build.sh >/dev/null

provenance-bins: ## build (or reuse) cosign and syft from their Go modules into ~/.cache/uds-vm-operator
	@tools/cosign/build.sh >/dev/null && tools/syft/build.sh >/dev/null

test-build: image provenance-bins ## build tier only: the operator image from inside, its signature and SBOM
	$(PY) -m pytest -q tests/build

test-floors: install ## the unit tier on the floor versions of the runtime dependencies (throwaway venv)
	$(PY) -m tools.deps.floors

# --- The Go anchor (issue 19, ADR 0010): a controller-runtime operator the fleet bench measures ours against ---
.PHONY: go-anchor
go-anchor: ## build (or reuse) bench/go-anchor from the Go module proxy into ~/.cache/uds-vm-operator; links .envtest/bin/go-anchor
	@bench/go-anchor/build.sh >/dev/null

# --- Chart scanning (issue 32, docs/chart-scanning.md): kubeconform and checkov on the rendered chart, offline ---
.PHONY: scan-bins chart-scan
scan-bins: install envtest-bins ## build (or reuse) kubeconform, checkov's own venv and kubeconform's schemas (from the real kube-apiserver) in ~/.cache/uds-vm-operator
	@tools/scan/kubeconform-build.sh >/dev/null
	@tools/scan/checkov-build.sh >/dev/null
	@$(PY) -m tools.scan.k8s_schemas >/dev/null

chart-scan: install helm-bin scan-bins ## kubeconform -strict and checkov on every flavour of the rendered chart; skips justified in docs/chart-scanning.md
	$(PY) -m tools.scan.chart_scan
