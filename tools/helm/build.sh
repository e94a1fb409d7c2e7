#!/usr/bin/env bash
# Build the `helm` CLI from its Go module (helm.sh/helm/v3 at HELM_VERSION) into a cache outside the clone,
# the same way tools/envtest/build.sh builds the control plane: committed go.mod/go.sum only, no binaries.
# Prints the path of the helm binary on stdout; a warm run only checks a stamp file.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
bin="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/helm-${HELM_VERSION}/bin"
stamp="$bin/.stamp"
want="helm=${HELM_VERSION} $(sha256sum < "$here/go.sum" | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$bin/helm" ]; then
  echo "$bin/helm"
  exit 0
fi
command -v go >/dev/null || { echo "error: Go is required to build helm (install Go >= 1.24)" >&2; exit 1; }
grep -q "helm.sh/helm/v3 ${HELM_VERSION}" "$here/go.mod" \
  || { echo "error: tools/helm/go.mod does not pin helm.sh/helm/v3 ${HELM_VERSION} (versions.env); run: cd tools/helm && go get -tool helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2; exit 1; }
mkdir -p "$bin"
# shellcheck source=/dev/null
. "$root/tools/go-build-env.sh"
export CGO_ENABLED=0
# Like helm's own Makefile: the default Kubernetes version of `helm template`/`helm lint` follows the
# client-go it was built with (v0.37 -> 1.37), otherwise it would claim Kubernetes 1.20.
cgo="$(awk '$1 == "k8s.io/client-go" {print $2}' "$here/go.mod")"
kmaj=$(( $(echo "$cgo" | cut -d. -f1 | tr -d v) + 1 ))
kmin="$(echo "$cgo" | cut -d. -f2)"
ver="-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
for pkg in pkg/lint/rules pkg/chartutil; do
  ver="$ver -X helm.sh/helm/v3/${pkg}.k8sVersionMajor=${kmaj} -X helm.sh/helm/v3/${pkg}.k8sVersionMinor=${kmin}"
done
start=$(date +%s)
echo "building helm ${HELM_VERSION} into $bin" >&2
(cd "$here" && go build -trimpath -ldflags "-s -w $ver" -o "$bin/helm" helm.sh/helm/v3/cmd/helm) >&2
echo "$want" > "$stamp"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$bin/helm"
