#!/usr/bin/env bash
# Put Zarf's real package schema (zarf.schema.json at the root of the Go module github.com/zarf-dev/zarf,
# pinned by ZARF_VERSION in versions.env) into the cache and print its path. `go mod download` verifies the
# module against the Go checksum database, so the schema is the one upstream released.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
dest="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/zarf-${ZARF_VERSION}"
schema="$dest/zarf.schema.json"
if [ -s "$schema" ]; then
  echo "$schema"
  exit 0
fi
command -v go >/dev/null || { echo "error: Go is required to fetch zarf.schema.json from the Go module proxy (install Go >= 1.24)" >&2; exit 1; }
mkdir -p "$dest"
dir="$(cd "$dest" && GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod go mod download -json "github.com/zarf-dev/zarf@${ZARF_VERSION}" \
       | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if d.get("Error") else print(d["Dir"])')"
[ -f "$dir/zarf.schema.json" ] || { echo "error: github.com/zarf-dev/zarf@${ZARF_VERSION} has no zarf.schema.json at its root" >&2; exit 1; }
cp "$dir/zarf.schema.json" "$schema.tmp" && mv "$schema.tmp" "$schema"
echo "$schema"
