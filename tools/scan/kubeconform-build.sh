#!/usr/bin/env bash
# Build kubeconform (Kubernetes manifest validation, issue 32) from its Go module at KUBECONFORM_VERSION, into
# ~/.cache/uds-vm-operator/kubeconform-<version>/bin like cosign and syft. Prints the binary's path on stdout.
# Its schemas are not downloaded (no internet here): tools/scan/k8s_schemas.py writes them from the real
# kube-apiserver of tools/envtest.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
exec "$root/tools/provenance/build-go-tool.sh" kubeconform github.com/yannh/kubeconform \
  github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION" "-X main.version=${KUBECONFORM_VERSION}"
