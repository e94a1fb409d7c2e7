#!/usr/bin/env bash
# `make tiny-guest-image`: build (or reuse) the cached tiny test guest and expose it as
# .envtest/guest/tiny.{qcow2,raw} (symlinks into the cache). Prints that folder.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cache="$("$repo/tools/guest/build-tiny-image.sh")"
out="$repo/.envtest/guest"
mkdir -p "$out"
for ext in qcow2 raw; do ln -sfn "$cache/tiny.$ext" "$out/tiny.$ext"; done
echo "$out"
