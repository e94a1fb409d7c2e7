#!/usr/bin/env bash
# Images for virt-api and virt-controller: a Debian bookworm minbase root (mmdebstrap, from Debian's packages)
# plus the binary from tools/kubevirt/build.sh, user 1001 like KubeVirt's own images (the Deployments set
# runAsNonRoot). Each is kept as an OCI archive in the build cache, so a warm run rebuilds nothing; when the
# node's loopback registry is up (.envtest/registry), the images are pushed there as
# <registry>/<component>:<KUBEVIRT_VERSION>, the references virt-operator's install strategy names.
# The node half, virt-launcher and virt-handler, is built below from a trixie root (ADR 0015).
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
# The node half: virt-launcher and virt-handler, from the binaries tools/kubevirt/build-node.sh builds in a trixie
# root, on a trixie runtime root (libvirt 11.3 and QEMU 10, which those binaries link and drive; reference:
# real-kubevirt-boot.md). virt-handler's image is the launcher's plus its own binaries, so the two share their
# big layer in the registry and in containerd.
node_bin="$("$here/build-node.sh")"
archive_uri="$("$root/tools/debian-archive.sh")"
runtime_pkgs="libvirt-daemon,libvirt-daemon-driver-qemu,libvirt-daemon-log,libvirt-clients,qemu-system-x86,qemu-utils,libnbd0"
runtime_pkgs="$runtime_pkgs,iproute2,nftables,procps,util-linux,xorriso,ca-certificates,busybox-static"
runtime_key="$(echo "$runtime_pkgs $archive_uri" | sha256sum | cut -c1-12)"
runtime_dir="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/trixie-launcher-root-$runtime_key"
runtime_tar="$runtime_dir/rootfs.tar"
if [ ! -s "$runtime_tar" ]; then
  mkdir -p "$runtime_dir"
  t=$(date +%s)
  # Docs, manuals and locales are not needed; apt's lists are dropped after the install.
  mmdebstrap --quiet --variant=apt --include="$runtime_pkgs" --format=tar \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    trixie "$runtime_tar.part" "deb $archive_uri trixie main" >&2
  mv "$runtime_tar.part" "$runtime_tar"
  echo "  trixie launcher root: $(( $(date +%s) - t )) s" >&2
fi
node_key="$( (cat "$node_bin/.stamp" "$here/images.sh" "$here"/launcher/*; echo "$runtime_key") | sha256sum | cut -c1-12)"
launcher_archive="$images/virt-launcher-$node_key.tar"
handler_archive="$images/virt-handler-$node_key.tar"
launcher_ref="virt-launcher:${KUBEVIRT_VERSION}"
handler_ref="virt-handler:${KUBEVIRT_VERSION}"
if [ ! -s "$launcher_archive" ] || [ ! -s "$handler_archive" ]; then
  t=$(date +%s)
  staging="$(mktemp -d)"
  trap 'rm -rf "$staging"' EXIT
  conf="$node_bin/launcher-config"
  mkdir -p "$staging/usr/bin" "$staging/usr/sbin" "$staging/usr/libexec/kubevirt" "$staging/etc/libvirt/hooks" \
    "$staging/usr/lib64/qemu-kvm"
  for b in virt-launcher virt-launcher-monitor virt-tail virt-freezer virt-probe container-disk; do
    install -m 0755 "$node_bin/$b" "$staging/usr/bin/$b"
  done
  install -m 0755 "$node_bin/virt-libvirt-hook-client" "$staging/usr/bin/libvirt-hook-client"
  install -m 0755 "$conf/node-labeller.sh" "$staging/usr/bin/node-labeller.sh"
  install -m 0644 "$conf/qemu.conf" "$conf/virtqemud.conf" "$staging/etc/libvirt/"
  install -m 0755 "$conf/qemu" "$staging/etc/libvirt/hooks/qemu"
  install -m 0644 "$conf/nsswitch.conf" "$staging/etc/nsswitch.conf"
  install -m 0755 "$here/launcher/virtqemud" "$staging/usr/sbin/virtqemud"
  c="$(buildah from scratch)"
  buildah add --quiet "$c" "$runtime_tar" / >/dev/null
  buildah copy --quiet "$c" "$staging/." / >/dev/null
  # KubeVirt's launcher image: user and group qemu (107), /var/run a relative link, the hook owned by qemu,
  # and trixie's monolithic libvirtd copied under the name virtqemud (the launcher starts and watches a process
  # of that name; tools/kubevirt/launcher/virtqemud is the shim that runs it).
  buildah run "$c" -- sh -c '
    set -e
    grep -q "^qemu:" /etc/group || echo "qemu:x:107:" >> /etc/group
    grep -q "^qemu:" /etc/passwd || echo "qemu:x:107:107:qemu:/home/qemu:/bin/bash" >> /etc/passwd
    mkdir -p /home/qemu && chown 107:107 /home/qemu
    chown 107:107 /etc/libvirt/hooks/qemu
    rm -rf /var/run && ln -s ../run /var/run
    cp /usr/sbin/libvirtd /usr/libexec/kubevirt/virtqemud
    setcap cap_net_bind_service+ep /usr/bin/virt-launcher-monitor
  ' >&2
  # Root by default, as KubeVirt's own launcher image: virt-controller sets runAsUser 107 on a non-root VM's
  # pod, and virt-handler's node-labeller init container (same image, privileged) needs root to open /dev/kvm.
  buildah config --user 0 --entrypoint '["/usr/bin/virt-launcher"]' --cmd "" \
    --label "io.kubevirt.version=${KUBEVIRT_VERSION}" "$c"
  keep_image "$c" "$launcher_ref" "$launcher_archive"
  h="$(buildah from "localhost/kubevirt/$launcher_ref")"
  for b in virt-handler virt-chroot; do buildah copy --quiet --chmod 0755 "$h" "$node_bin/$b" "/usr/bin/$b" >/dev/null; done
  buildah config --user 0 --entrypoint '["/usr/bin/virt-handler"]' --cmd "" "$h"
  keep_image "$h" "$handler_ref" "$handler_archive"
  echo "  images virt-launcher, virt-handler: $(( $(date +%s) - t )) s" >&2
fi
push_image "$launcher_ref" "$launcher_archive" fresh
push_image "$handler_ref" "$handler_archive" fresh
echo "$images"
