#!/usr/bin/env bash
# Build cosign (image signing and verification, issue 20) from its Go module at COSIGN_VERSION.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
exec "$root/tools/provenance/build-go-tool.sh" cosign github.com/sigstore/cosign/v3 \
  github.com/sigstore/cosign/v3/cmd/cosign "$COSIGN_VERSION" \
  "-X sigs.k8s.io/release-utils/version.gitVersion=${COSIGN_VERSION}"
