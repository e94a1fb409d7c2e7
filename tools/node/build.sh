#!/usr/bin/env bash
# Build the real node's binaries into a cache outside the clone: kubelet, kube-scheduler and kube-proxy from the
# same k8s.io/kubernetes module, pin and staging replacements as kube-apiserver (tools/node/k8s repeats
# tools/envtest/k8s's replace lines; this script refuses to build if they differ), CoreDNS and kube-router from
# their own tools modules. A separate tools module keeps the control plane's cache key untouched.
# The pins (versions.env) and the tools modules' go.mod files key the cache; a warm run only checks a stamp file.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/node-${K8S_VERSION}-coredns-${COREDNS_VERSION}-kuberouter-${KUBE_ROUTER_VERSION}"
bin="$cache/bin"
stamp="$bin/.stamp"
names=(kubelet kube-scheduler kube-proxy coredns kube-router)
want="k8s=${K8S_VERSION} coredns=${COREDNS_VERSION} kube-router=${KUBE_ROUTER_VERSION} $(cat "$here/k8s/go.mod" "$here/coredns/go.mod" "$here/kube-router/go.mod" | sha256sum | cut -c1-16)"
complete=1
for name in "${names[@]}"; do [ -x "$bin/$name" ] || complete=0; done
if [ "$complete" = 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "error: Go is required to build the real node (install Go >= 1.24)" >&2; exit 1; }
grep -q "github.com/coredns/coredns ${COREDNS_VERSION}" "$here/coredns/go.mod" || { echo "error: tools/node/coredns/go.mod does not pin CoreDNS ${COREDNS_VERSION} (versions.env)" >&2; exit 1; }
grep -q "github.com/cloudnativelabs/kube-router/v2 ${KUBE_ROUTER_VERSION}" "$here/kube-router/go.mod" || { echo "error: tools/node/kube-router/go.mod does not pin kube-router ${KUBE_ROUTER_VERSION} (versions.env)" >&2; exit 1; }
replaces() { grep -E '^replace ' "$1" | sort; }
if [ "$(replaces "$here/k8s/go.mod")" != "$(replaces "$root/tools/envtest/k8s/go.mod")" ] \
   || ! grep -q "k8s.io/kubernetes ${K8S_VERSION}" "$here/k8s/go.mod"; then
  echo "error: tools/node/k8s/go.mod must pin k8s.io/kubernetes ${K8S_VERSION} with the same replace lines as tools/envtest/k8s/go.mod (the node runs the plane's Kubernetes)" >&2
  exit 1
fi
mkdir -p "$bin"
# shellcheck source=/dev/null
. "$root/tools/go-build-env.sh"
export CGO_ENABLED=0
ver="-X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=$(echo "$K8S_VERSION" | cut -d. -f1 | tr -d v) -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
start=$(date +%s)
echo "building the real node (${K8S_VERSION}, CoreDNS ${COREDNS_VERSION}, kube-router ${KUBE_ROUTER_VERSION}) into $bin" >&2
# Two at a time: the machines have two cores, and each go build already uses both for its compile steps.
(cd "$here/k8s" && go build -trimpath -ldflags "-s -w $ver" -o "$bin/kubelet" k8s.io/kubernetes/cmd/kubelet) >&2 &
k1=$!
(cd "$here/coredns" && go build -trimpath -ldflags "-s -w" -o "$bin/coredns" github.com/coredns/coredns) >&2 &
k2=$!
wait $k1; wait $k2
(cd "$here/k8s" && go build -trimpath -ldflags "-s -w $ver" -o "$bin/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler) >&2 &
k1=$!
(cd "$here/k8s" && go build -trimpath -ldflags "-s -w $ver" -o "$bin/kube-proxy" k8s.io/kubernetes/cmd/kube-proxy) >&2 &
k2=$!
wait $k1; wait $k2
(cd "$here/kube-router" && go build -trimpath -ldflags "-s -w" -o "$bin/kube-router" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router) >&2
echo "$want" > "$stamp"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
