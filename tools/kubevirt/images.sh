#!/usr/bin/env bash
# Images for virt-api and virt-controller: a Debian bookworm minbase root (mmdebstrap, from Debian's packages)
# plus the binary from tools/kubevirt/build.sh, user 1001 like KubeVirt's own images (the Deployments set
# runAsNonRoot). Each is kept as an OCI archive in the build cache, so a warm run rebuilds nothing; when the
# node's loopback registry is up (.envtest/registry), the images are pushed there as
# <registry>/<component>:<KUBEVIRT_VERSION>, the references virt-operator's install strategy names.
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
    buildah commit --quiet --rm "$c" "localhost/kubevirt/$ref" >/dev/null
    buildah push --quiet "localhost/kubevirt/$ref" "oci-archive:$archive.part:kubevirt/$ref"
    mv "$archive.part" "$archive"
    echo "  image $name: $(( $(date +%s) - t )) s" >&2
  fi
  if [ -s "$state/registry" ]; then
    registry="$(tr -d '[:space:]' < "$state/registry")"
    buildah inspect --type image "localhost/kubevirt/$ref" >/dev/null 2>&1 \
      || buildah pull --quiet "oci-archive:$archive" >/dev/null
    buildah push --quiet --tls-verify=false "localhost/kubevirt/$ref" "docker://$registry/$ref"
  fi
done
echo "$images"
