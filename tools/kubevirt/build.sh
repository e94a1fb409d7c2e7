#!/usr/bin/env bash
# Build KubeVirt's virt-api and virt-controller (KUBEVIRT_VERSION, versions.env) and our manifest generator
# (tools/kubevirt/manifests, virt-operator's install strategy) from the Go module, into a cache outside the
# clone keyed by the version and the tools module's inputs. A warm run only checks a stamp file.
# Prints the bin folder on stdout; progress and timings go to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
inputs="$(cat "$here/go.mod" "$here/go.sum" "$here/manifests/main.go" | sha256sum | cut -c1-12)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/kubevirt-${KUBEVIRT_VERSION}-${inputs}"
bin="$cache/bin"
stamp="$bin/.stamp"
components=(virt-api virt-controller)
want="kubevirt=${KUBEVIRT_VERSION} ${inputs}"
ready=1
for name in "${components[@]}" kubevirt-manifests; do [ -x "$bin/$name" ] || ready=0; done
if [ "$ready" = 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "error: Go is required to build KubeVirt (install Go >= 1.24)" >&2; exit 1; }
grep -q "kubevirt.io/kubevirt ${KUBEVIRT_VERSION}" "$here/go.mod" \
  || { echo "error: tools/kubevirt/go.mod does not pin kubevirt.io/kubevirt ${KUBEVIRT_VERSION} (versions.env)" >&2; exit 1; }
mkdir -p "$bin"
# CGO off: virt-api and virt-controller need no C library; the static binaries run on a minbase image.
# shellcheck source=/dev/null
. "$root/tools/go-build-env.sh"
export CGO_ENABLED=0
ver="-X kubevirt.io/client-go/version.gitVersion=${KUBEVIRT_VERSION}"
start=$(date +%s)
echo "building KubeVirt ${KUBEVIRT_VERSION} (${components[*]}) into $bin; a cold build takes minutes" >&2
cd "$here"
for name in "${components[@]}"; do
  t=$(date +%s)
  go build -trimpath -ldflags "-s -w $ver" -o "$bin/$name" "kubevirt.io/kubevirt/cmd/$name" >&2
  echo "  $name: $(( $(date +%s) - t )) s" >&2
done
go build -trimpath -ldflags "-s -w" -o "$bin/kubevirt-manifests" ./manifests >&2
echo "$want" > "$stamp"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
