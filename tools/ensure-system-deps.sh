#!/usr/bin/env bash
# The image tier judges our parsers against qemu-img, and the prep benchmark against openssl and sha256sum.
# CI installs them here rather than letting tests skip.
set -euo pipefail
missing=()
command -v qemu-img >/dev/null || missing+=(qemu-utils)
command -v openssl >/dev/null || missing+=(openssl)
command -v sha256sum >/dev/null || missing+=(coreutils)
command -v xorriso >/dev/null || missing+=(xorriso)  # ISO images for the image tier
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "error: missing ${missing[*]}; install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} (Debian packages) for the test tiers" >&2
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
