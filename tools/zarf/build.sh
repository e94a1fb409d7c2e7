#!/usr/bin/env bash
# `make zarf-build`: build the zarf CLI from its Go module (github.com/zarf-dev/zarf at ZARF_VERSION, with the
# replace directives upstream's go.mod needs copied into tools/zarf/go.mod, because `go install mod@ver` refuses
# modules with replaces) into the cache, then `zarf package create` this repository's zarf.yaml into out/.
# Creating the package also needs the operator image (docker build -t <image> .) where zarf can pull it from
# (a local Docker daemon or a registry); without one this script says so and stops.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
bin="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/zarf-${ZARF_VERSION}/bin"
stamp="$bin/.stamp"
want="zarf=${ZARF_VERSION} $(sha256sum < "$here/go.sum" | cut -c1-16)"
command -v go >/dev/null || { echo "zarf-build: Go is required to build the zarf CLI (install Go >= 1.25)" >&2; exit 1; }
grep -q "github.com/zarf-dev/zarf ${ZARF_VERSION}" "$here/go.mod" \
  || { echo "zarf-build: tools/zarf/go.mod does not pin github.com/zarf-dev/zarf ${ZARF_VERSION} (versions.env)" >&2; exit 1; }
if ! { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$bin/zarf" ]; }; then
  mkdir -p "$bin"
  echo "zarf-build: building zarf ${ZARF_VERSION} (large: syft, grype, helm, oras; expect 10-30 min on 2 cores)" >&2
  export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=readonly GOWORK=off
  if ! (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$bin/zarf" github.com/zarf-dev/zarf) >&2; then
    echo "zarf-build: the zarf CLI did not build from its Go module here; validate zarf.yaml with" >&2
    echo "  pytest tests/unit/test_zarf_package.py  (upstream zarf.schema.json) and build the package on a" >&2
    echo "  machine with a released zarf binary: zarf package create . --confirm -o out/" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
"$bin/zarf" version >&2
mkdir -p "$root/out"
cd "$root"
if ! "$bin/zarf" package create . --confirm --skip-sbom -o out/; then
  echo "zarf-build: zarf could not create the package. The usual cause here is the operator image: build it" >&2
  echo "  (docker build -t ghcr.io/uds-vm-operator/uds-vm-operator:0.1.0 .) where zarf can pull it; this machine" >&2
  echo "  has no container runtime, so the package can only be created on one that does." >&2
  exit 1
fi
