#!/usr/bin/env bash
# Build syft (SBOM generator, issue 20) from its Go module at SYFT_VERSION.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
exec "$root/tools/provenance/build-go-tool.sh" syft github.com/anchore/syft \
  github.com/anchore/syft/cmd/syft "$SYFT_VERSION" "-X main.version=${SYFT_VERSION}"
