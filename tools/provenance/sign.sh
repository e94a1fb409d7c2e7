#!/usr/bin/env bash
# Provenance of the operator image (issue 20): an SPDX SBOM by syft, a cosign signature and an SBOM attestation,
# all pushed beside the image in the registry. Offline: no transparency log, no Fulcio, no TUF (a key pair).
#   sign.sh sign   KEY REF SBOM_OUT ARCHIVE   write the SBOM of ARCHIVE, sign REF, attest the SBOM to REF
#   sign.sh verify PUB REF                    verify REF's signature and SBOM attestation against PUB
# KEY's password comes from COSIGN_PASSWORD. The registry is the plain-HTTP loopback one.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cosign="$("$root/tools/cosign/build.sh")"
syft="$("$root/tools/syft/build.sh")"
export SYFT_CHECK_FOR_APP_UPDATE=false
registry_flags=(--allow-insecure-registry --allow-http-registry)
case "${1:-}" in
  sign)
    key="$2" ref="$3" sbom="$4" archive="$5"
    "$syft" scan "oci-archive:$archive" -q -o "spdx-json=$sbom"
    # --use-signing-config=false --tlog-upload=false: sign with the key alone, upload to no log.
    "$cosign" sign --yes --key "$key" --use-signing-config=false --tlog-upload=false "${registry_flags[@]}" "$ref"
    "$cosign" attest --yes --key "$key" --use-signing-config=false --tlog-upload=false "${registry_flags[@]}" \
      --type spdxjson --predicate "$sbom" "$ref"
    ;;
  verify)
    pub="$2" ref="$3"
    "$cosign" verify --key "$pub" --insecure-ignore-tlog=true "${registry_flags[@]}" "$ref" >/dev/null
    "$cosign" verify-attestation --key "$pub" --insecure-ignore-tlog=true "${registry_flags[@]}" \
      --type spdxjson "$ref" >/dev/null
    ;;
  *) echo "usage: $0 sign KEY REF SBOM ARCHIVE | verify PUB REF" >&2; exit 2 ;;
esac
