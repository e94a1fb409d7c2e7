#!/usr/bin/env bash
# Build the Versity S3 gateway (an S3 server that checks every request's SigV4 signature and keeps each object
# as a plain file) from its Go module at VERSITYGW_VERSION, into ~/.cache/uds-vm-operator/versitygw-<version>/bin
# like cosign and kubeconform. It is the backup tier's object store (issue 33, ADR 0020): a judge, not a
# dependency; a site points spec.backup at its own S3 (AWS, Ceph RGW, MinIO, ...). Prints the binary's path.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
exec "$root/tools/provenance/build-go-tool.sh" versitygw github.com/versity/versitygw \
  github.com/versity/versitygw/cmd/versitygw "$VERSITYGW_VERSION" ""
