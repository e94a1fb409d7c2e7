#!/usr/bin/env bash
# Build the Go anchor (a benchmark tool, not the product; ADR 0010) from the Go module proxy into a cache
# outside the clone, keyed by the hash of its inputs (sources, go.mod, go.sum, the Go toolchain), and link
# it to .envtest/bin/go-anchor. A warm run only checks a stamp file. Prints the binary's path on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
command -v go >/dev/null || { echo "error: Go is required to build the Go anchor (install Go >= 1.24)" >&2; exit 1; }
grep -q "sigs.k8s.io/controller-runtime ${CONTROLLER_RUNTIME_VERSION}" "$here/go.mod" \
  || { echo "error: bench/go-anchor/go.mod does not pin controller-runtime ${CONTROLLER_RUNTIME_VERSION} (versions.env)" >&2; exit 1; }
grep -q "k8s.io/client-go ${K8S_STAGING_VERSION}" "$here/go.mod" \
  || { echo "error: bench/go-anchor/go.mod does not pin k8s.io/client-go ${K8S_STAGING_VERSION} (versions.env)" >&2; exit 1; }
inputs="$(cd "$here" && cat go.mod go.sum ./*.go | sha256sum | cut -c1-16)-$(go env GOVERSION)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/go-anchor-${inputs}"
bin="$cache/bin/go-anchor"
stamp="$cache/bin/.stamp"
link="$root/.envtest/bin/go-anchor"
if ! { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs" ] && [ -x "$bin" ]; }; then
  mkdir -p "$cache/bin"
  # shellcheck source=/dev/null
  . "$root/tools/go-build-env.sh"
  export CGO_ENABLED=0
  start=$(date +%s)
  echo "building the Go anchor (controller-runtime ${CONTROLLER_RUNTIME_VERSION}) into $bin" >&2
  (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .) >&2
  mv "$bin.tmp" "$bin"
  echo "$inputs" > "$stamp"
  echo "built in $(( $(date +%s) - start )) s" >&2
fi
mkdir -p "$(dirname "$link")"
if [ "$(readlink "$link" 2>/dev/null)" != "$bin" ]; then
  ln -sfn "$bin" "$link"
fi
echo "$link"
