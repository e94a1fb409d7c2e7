#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and etcd from their Go modules into a cache outside the clone.
# The pinned versions (versions.env) key the cache, so a warm run only checks a stamp file.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"
bin="$cache/bin"
stamp="$bin/.stamp"
want="k8s=${K8S_VERSION} etcd=${ETCD_VERSION} $(cat "$here/k8s/go.sum" "$here/etcd/go.sum" | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ] && [ -x "$bin/etcd" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "error: Go is required to build the test control plane (install Go >= 1.24)" >&2; exit 1; }
grep -q "k8s.io/kubernetes ${K8S_VERSION}" "$here/k8s/go.mod" || { echo "error: tools/envtest/k8s/go.mod does not pin k8s.io/kubernetes ${K8S_VERSION} (versions.env)" >&2; exit 1; }
grep -q "go.etcd.io/etcd/server/v3 ${ETCD_VERSION}" "$here/etcd/go.mod" || { echo "error: tools/envtest/etcd/go.mod does not pin etcd ${ETCD_VERSION} (versions.env)" >&2; exit 1; }
mkdir -p "$bin"
# shellcheck source=/dev/null
. "$root/tools/go-build-env.sh"
export CGO_ENABLED=0
ver="-X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=$(echo "$K8S_VERSION" | cut -d. -f1 | tr -d v) -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
start=$(date +%s)
echo "building the test control plane (${K8S_VERSION}, etcd ${ETCD_VERSION}) into $bin; a cold build takes a while" >&2
(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3) >&2
(cd "$here/k8s" && go build -trimpath -ldflags "-s -w $ver" -o "$bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver) >&2
(cd "$here/k8s" && go build -trimpath -ldflags "-s -w $ver" -o "$bin/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager) >&2
echo "$want" > "$stamp"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
