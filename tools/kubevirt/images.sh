#!/usr/bin/env bash
# Images for virt-api and virt-controller: a Debian bookworm minbase root (mmdebstrap, from Debian's packages)
# plus the binary from tools/kubevirt/build.sh, user 1001 like KubeVirt's own images (the Deployments set
# runAsNonRoot). Each is kept as an OCI archive in the build cache, so a warm run rebuilds nothing; when the
# node's loopback registry is up (.envtest/registry), the images are pushed there as
# <registry>/<component>:<KUBEVIRT_VERSION>, the references virt-operator's install strategy names.
# The third image, <registry>/virt-launcher:<KUBEVIRT_VERSION>, is a STAND-IN (tools/kubevirt/launcher-stand-in,
# ADR 0008): busybox plus two scripts at the paths virt-controller's launcher pod runs, because v1.8.4's
# virt-launcher does not build here. It lets the real launcher pod run, so packets can reach it; no guest
# boots in it.
# Usage: tools/kubevirt/images.sh [STATE_DIR]   (STATE_DIR defaults to .envtest)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state="${1:-$root/.envtest}"
# shellcheck source=/dev/null
. "$root/versions.env"
bin="$("$here/build.sh")"
cache="$(dirname "$bin")"
images="$cache/images"
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
base_dir="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/debian-bookworm-minbase"
base="$base_dir/rootfs.tar"
if [ ! -s "$base" ]; then
  command -v mmdebstrap >/dev/null || { echo "error: mmdebstrap missing (apt-get install mmdebstrap; make node-deps)" >&2; exit 1; }
  mkdir -p "$base_dir"
  t=$(date +%s)
  mmdebstrap --quiet --variant=minbase --format=tar --include=ca-certificates bookworm "$base.part" >&2
  mv "$base.part" "$base"
  echo "  minbase root: $(( $(date +%s) - t )) s" >&2
fi
mkdir -p "$images"
# Commit container $1 as localhost/kubevirt/$2 and keep it as the OCI archive $3 (written whole or not at all).
keep_image() {
  buildah commit --quiet --rm "$1" "localhost/kubevirt/$2" >/dev/null
  buildah push --quiet "localhost/kubevirt/$2" "oci-archive:$3.part:kubevirt/$2"
  mv "$3.part" "$3"
}
# Push localhost/kubevirt/$1 into the node's registry when the node runs, loading it from the archive $2 first
# if buildah's storage lacks it, or always with $3 = fresh (the name may hold an older build).
push_image() {
  [ -s "$state/registry" ] || return 0
  local registry
  registry="$(tr -d '[:space:]' < "$state/registry")"
  if [ "${3:-}" = fresh ] || ! buildah inspect --type image "localhost/kubevirt/$1" >/dev/null 2>&1; then
    buildah pull --quiet "oci-archive:$2" >/dev/null
  fi
  buildah push --quiet --tls-verify=false "localhost/kubevirt/$1" "docker://$registry/$1"
}
for name in virt-api virt-controller; do
  archive="$images/$name.tar"
  ref="$name:${KUBEVIRT_VERSION}"
  if [ ! -s "$archive" ]; then
    t=$(date +%s)
    c="$(buildah from scratch)"
    buildah add --quiet "$c" "$base" / >/dev/null
    buildah copy --quiet "$c" "$bin/$name" "/usr/bin/$name" >/dev/null
    buildah config --user 1001 --entrypoint "[\"/usr/bin/$name\"]" --cmd "" \
      --label "io.kubevirt.version=${KUBEVIRT_VERSION}" "$c"
    keep_image "$c" "$ref" "$archive"
    echo "  image $name: $(( $(date +%s) - t )) s" >&2
  fi
  push_image "$ref" "$archive"
done
# The launcher stand-in: static busybox (Debian's busybox-static) and the two scripts; its archive is keyed by
# their bytes, so an edit rebuilds it and nothing else.
stand_in="$here/launcher-stand-in"
[ -x /bin/busybox ] || { echo "error: /bin/busybox missing (apt-get install busybox-static; make node-deps)" >&2; exit 1; }
key="$(cat /bin/busybox "$stand_in/virt-launcher-monitor" "$stand_in/virt-tail" | sha256sum | cut -c1-12)"
archive="$images/virt-launcher-stand-in-$key.tar"
ref="virt-launcher:${KUBEVIRT_VERSION}"
if [ ! -s "$archive" ]; then
  t=$(date +%s)
  staging="$(mktemp -d)"
  trap 'rm -rf "$staging"' EXIT
  mkdir -p "$staging/bin" "$staging/usr/bin" "$staging/tmp"
  chmod 1777 "$staging/tmp"
  cp /bin/busybox "$staging/bin/busybox"
  for applet in sh httpd sleep; do ln -s busybox "$staging/bin/$applet"; done
  install -m 0755 "$stand_in/virt-launcher-monitor" "$stand_in/virt-tail" "$staging/usr/bin/"
  c="$(buildah from scratch)"
  buildah copy --quiet "$c" "$staging/." / >/dev/null
  buildah config --user 107 --entrypoint '["/usr/bin/virt-launcher-monitor"]' --cmd "" \
    --label "io.kubevirt.version=${KUBEVIRT_VERSION}" --label "dev.uds.stand-in=virt-launcher" "$c"
  keep_image "$c" "$ref" "$archive"
  echo "  image virt-launcher (stand-in): $(( $(date +%s) - t )) s" >&2
fi
push_image "$ref" "$archive" fresh
echo "$images"
