#!/usr/bin/env bash
# Build one Go CLI from its pinned tools module (tools/<name>/go.mod + go.sum, committed) into
# ~/.cache/uds-vm-operator/<name>-<version>/bin, like tools/helm/build.sh. Prints the binary's path on
# stdout; a warm run only compares a stamp (name, version, go.sum hash) and exits.
# Usage: build-go-tool.sh NAME MODULE_PATH PACKAGE VERSION LDFLAGS
set -euo pipefail
name="$1" module="$2" pkg="$3" version="$4" ldflags="$5"
root="$(cd "$(dirname "$0")/../.." && pwd)"
moddir="$root/tools/$name"
bin="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/${name}-${version}/bin"
stamp="$bin/.stamp"
want="${name}=${version} $(sha256sum < "$moddir/go.sum" | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$bin/$name" ]; then
  echo "$bin/$name"
  exit 0
fi
command -v go >/dev/null || { echo "error: Go is required to build $name (install Go >= 1.24)" >&2; exit 1; }
grep -q "$module ${version}" "$moddir/go.mod" \
  || { echo "error: tools/$name/go.mod does not pin $module ${version} (versions.env); run: cd tools/$name && go get -tool $pkg@${version}" >&2; exit 1; }
mkdir -p "$bin"
# shellcheck source=/dev/null
. "$root/tools/go-build-env.sh"
export CGO_ENABLED=0
start=$(date +%s)
echo "building $name ${version} into $bin" >&2
(cd "$moddir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$bin/$name.tmp" "$pkg") >&2
mv "$bin/$name.tmp" "$bin/$name"
echo "$want" > "$stamp"
echo "built $name in $(( $(date +%s) - start )) s" >&2
echo "$bin/$name"
