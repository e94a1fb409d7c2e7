#!/usr/bin/env bash
# `make zarf-build`: the Zarf package of this repository, out/zarf-package-uds-vm-operator-<arch>-<version>.tar.zst,
# created by the zarf CLI built from its Go module (tools/zarf/build.sh) from zarf.yaml, offline:
# - the operator image zarf.yaml lists (ghcr.io/uds-vm-operator/uds-vm-operator:<tag>) is built by
#   tools/images/image.sh from this checkout (buildah, no network) and pushed into the loopback registry
#   (.envtest/registry, or ENVTEST_DIR/registry); `--registry-override` makes zarf pull it from there, while the
#   package keeps the reference zarf.yaml and the chart name (the zarf agent rewrites it on the site);
# - the image is referenced by digest (zarf.yaml's package template OPERATOR_DIGEST, stamped here) and signed
#   with cosign; its signature travels in the package as the image's `sha256-<hex>.sig` tag (cosign's layout),
#   so `cosign verify` works against the site's registry after the deploy;
# - the package itself is signed (zarf.yaml.sig over the definition and the checksums of every file, images
#   included); deploy it with `zarf package deploy PKG --key PUB --verify`, which refuses a tampered or
#   unsigned package before it touches the cluster;
# - Zarf generates the SBOMs itself (syft inside zarf) for the image and the component files; none skipped.
# Signing key: ZARF_SIGNING_KEY (a cosign key file or KMS URI; its password in COSIGN_PASSWORD). Without it a
# development key pair is made once under ~/.cache/uds-vm-operator/signing-dev/ and a warning says so.
# The public key (KEY with .pub, when it exists) is copied beside the package as uds-vm-operator-signing.pub.
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
image="${image%@*}"                # zarf.yaml pins it by digest: the package template stamped below
repository="${image%:*}"           # ghcr.io/uds-vm-operator/uds-vm-operator
tag="${image##*:}"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator"
cosign="$("$root/tools/cosign/build.sh")"
key="${ZARF_SIGNING_KEY:-}"
if [ -z "$key" ]; then
  dev="$cache_root/signing-dev"
  if [ ! -s "$dev/cosign.key" ]; then
    mkdir -p "$dev"
    (cd "$dev" && COSIGN_PASSWORD="" "$cosign" generate-key-pair >/dev/null 2>&1)
  fi
  key="$dev/cosign.key"
  export COSIGN_PASSWORD=""
  echo "warning: signing with the development key $key (set ZARF_SIGNING_KEY and COSIGN_PASSWORD for a release)" >&2
fi
export COSIGN_PASSWORD="${COSIGN_PASSWORD-}"
# The operator image, tagged as zarf.yaml names it, in the loopback registry as REGISTRY/uds-vm-operator:TAG.
ref="$(OPERATOR_IMAGE_TAG="$tag" ENVTEST_DIR="$envtest_dir" "$root/tools/images/image.sh")"
digest="${ref##*@}"  # REGISTRY/uds-vm-operator@sha256:...
registry="$(tr -d '[:space:]' < "$envtest_dir/registry")"
# Key only: no transparency log, no Fulcio (air gap). The signature lands as REGISTRY/uds-vm-operator:sha256-<hex>.sig:
# cosign's tag layout (--new-bundle-format=false), an ordinary image manifest Zarf carries like any image (the
# bundle format's referrers index has no platform, and Zarf would not carry it).
"$cosign" sign --yes --key "$key" --new-bundle-format=false --use-signing-config=false --tlog-upload=false \
  --allow-insecure-registry --allow-http-registry "$ref" >&2
mkdir -p "$out"
cache="$cache_root/zarf-home"
mkdir -p "$cache"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
cd "$root"
"$zarf" package create . --confirm -o "$out" --zarf-cache "$cache/cache" --tmpdir "$tmp" \
  --registry-override "${repository%/*}=$registry" --log-format console --no-color \
  --set "OPERATOR_DIGEST=$digest" --set "OPERATOR_SIGNATURE_TAG=${digest/:/-}.sig" \
  --signing-key "$key" --signing-key-pass "$COSIGN_PASSWORD" >&2
pkg="$out/zarf-package-uds-vm-operator-$(go env GOARCH)-${version}.tar.zst"
[ -s "$pkg" ] || { echo "error: zarf did not write $pkg" >&2; exit 1; }
[ -s "${key%.key}.pub" ] && cp "${key%.key}.pub" "$out/uds-vm-operator-signing.pub"
echo "zarf-build: $pkg signed with $key, image $repository:$tag@$digest ($(du -h "$pkg" | cut -f1), $(( $(date +%s) - start )) s)" >&2
echo "$pkg"
