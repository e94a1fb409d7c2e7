#!/usr/bin/env bash
# `make zarf-build`: the Zarf package of this repository, out/zarf-package-uds-vm-operator-<arch>-<version>.tar.zst,
# created by the zarf CLI built from its Go module (tools/zarf/build.sh) from zarf.yaml, offline:
# - the operator image zarf.yaml lists (ghcr.io/uds-vm-operator/uds-vm-operator:<tag>) is built by
#   tools/images/image.sh from this checkout (buildah, no network) and pushed into the loopback registry
#   (.envtest/registry, or ENVTEST_DIR/registry); `--registry-override` makes zarf pull it from there, while the
#   package keeps the reference zarf.yaml and the chart name (the zarf agent rewrites it on the site);
# - Zarf generates the SBOMs itself (syft inside zarf) for the image and the component files; none skipped.
# Prints the package path on stdout. ZARF_OUT overrides the output directory (default out/).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
zarf="$("$here/build.sh")"
envtest_dir="${ENVTEST_DIR:-$root/.envtest}"
out="${ZARF_OUT:-$root/out}"
image="$(python3 -c 'import sys, yaml; pkg = yaml.safe_load(open(sys.argv[1]))
print(next(i for c in pkg["components"] for i in c.get("images", [])))' "$root/zarf.yaml")"
version="$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["metadata"]["version"])' "$root/zarf.yaml")"
repository="${image%:*}"           # ghcr.io/uds-vm-operator/uds-vm-operator
tag="${image##*:}"
# The operator image, tagged as zarf.yaml names it, in the loopback registry as REGISTRY/uds-vm-operator:TAG.
OPERATOR_IMAGE_TAG="$tag" ENVTEST_DIR="$envtest_dir" "$root/tools/images/image.sh" >/dev/null
registry="$(tr -d '[:space:]' < "$envtest_dir/registry")"
mkdir -p "$out"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/zarf-home"
mkdir -p "$cache"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
cd "$root"
"$zarf" package create . --confirm -o "$out" --zarf-cache "$cache/cache" --tmpdir "$tmp" \
  --registry-override "${repository%/*}=$registry" --log-format console --no-color >&2
pkg="$out/zarf-package-uds-vm-operator-$(go env GOARCH)-${version}.tar.zst"
[ -s "$pkg" ] || { echo "error: zarf did not write $pkg" >&2; exit 1; }
echo "zarf-build: $pkg ($(du -h "$pkg" | cut -f1), $(( $(date +%s) - start )) s)" >&2
echo "$pkg"
