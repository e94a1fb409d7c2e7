#!/usr/bin/env bash
# Build KubeVirt's own CLI, virtctl (KUBEVIRT_VERSION, versions.env), from the same tools module as virt-api
# and virt-controller (tools/kubevirt/go.mod), into a cache outside the clone keyed by the version and the
# module's go.sum. Only the benchmarks use it: `virtctl image-upload` is what a KubeVirt user uploads with, so
# bench/upload_clients.py measures `uds-vmctl upload` against it. Nothing at run time needs it.
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
inputs="$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)"
bin="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/virtctl-${KUBEVIRT_VERSION}-${inputs}/virtctl"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "error: Go is required to build virtctl" >&2; exit 1; }
grep -q "kubevirt.io/kubevirt ${KUBEVIRT_VERSION}" "$here/go.mod" \
  || { echo "error: tools/kubevirt/go.mod does not pin kubevirt.io/kubevirt ${KUBEVIRT_VERSION} (versions.env)" >&2; exit 1; }
mkdir -p "$(dirname "$bin")"
# shellcheck source=/dev/null
. "$root/tools/go-build-env.sh"
export CGO_ENABLED=0
start=$(date +%s)
echo "building virtctl ${KUBEVIRT_VERSION} into $(dirname "$bin")" >&2
cd "$here"
go build -trimpath -ldflags "-s -w -X kubevirt.io/client-go/version.gitVersion=${KUBEVIRT_VERSION}" \
  -o "$bin.tmp" kubevirt.io/kubevirt/cmd/virtctl >&2
mv "$bin.tmp" "$bin"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
