#!/usr/bin/env bash
# `make guest-image`: build (or reuse) the cached guest image and expose it as .envtest/guest/debian-12.{qcow2,raw}
# (symlinks into the cache), then record `uds-vmctl prep --json` for both in .envtest/guest/prep-*.json.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cache="$("$repo/tools/guest/build-image.sh")"
out="$repo/.envtest/guest"
mkdir -p "$out"
for ext in qcow2 raw; do
  ln -sfn "$cache/debian-12.$ext" "$out/debian-12.$ext"
  if [ ! -s "$cache/prep-$ext.json" ]; then
    "$repo/.venv/bin/uds-vmctl" prep --json "$cache/debian-12.$ext" > "$cache/prep-$ext.json.tmp"
    mv "$cache/prep-$ext.json.tmp" "$cache/prep-$ext.json"
  fi
  cp "$cache/prep-$ext.json" "$out/prep-$ext.json"
done
echo "$out"
