#!/usr/bin/env bash
# Base images made from Debian's packages only, cached as OCI archives and pushed into the local registry:
#   python-base  Debian bookworm minbase + python3 (3.11) + python3-venv + passwd: the Dockerfile's base
#                for the tests (real sites build FROM the public Python image, the Dockerfile's default)
#   pause        Kubernetes' own pause.c (from the k8s.io/kubernetes module) compiled statically: the
#                sandbox image containerd needs for every pod
#   busybox      Debian's static busybox (sh, nc, wget, httpd, ...) FROM scratch: test pods and probes
# Cached under ~/.cache/uds-vm-operator/images-<key>/, key = hash of every input (this script, lib.sh, the
# package list, pause.c, the busybox binary); a warm run only pushes (a no-op for blobs the registry has)
# and rewrites the reference files .envtest/{python-base,busybox}-image (NAME@sha256:DIGEST) and
# .envtest/pause-image (REGISTRY/pause:3.10, the tag containerd's sandbox_image takes).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tools/images/lib.sh
. "$here/lib.sh"
# shellcheck source=/dev/null
. "$images_root/versions.env"

suite=bookworm
mirror="$("$images_root/tools/debian-archive.sh")"
# libatomic1: regopy (the rego engine of `uds-vmctl compliance`) loads libatomic.so.1 through ctypes.
python_packages="python3,python3-venv,passwd,libatomic1"
for tool in buildah mmdebstrap gcc curl; do
  command -v "$tool" >/dev/null || die "$tool is missing: run tools/images/ensure-deps.sh"
done
[ -x /bin/busybox ] && /bin/busybox --list | grep -x httpd >/dev/null || die "static busybox missing: run tools/images/ensure-deps.sh"
pause_dir="$(GOFLAGS= go env GOMODCACHE)/k8s.io/kubernetes@${K8S_VERSION}/build/pause"
[ -f "$pause_dir/linux/pause.c" ] || die "pause.c not found in $pause_dir (make envtest-bins downloads the k8s.io/kubernetes module)"
pause_tag="$(awk -F'[ ?=]+' '$1 == "TAG" {print $2}' "$pause_dir/Makefile")"
[ -n "$pause_tag" ] || die "no TAG in $pause_dir/Makefile"

key="$( { cat "$here/base.sh" "$here/lib.sh"; echo "$suite $mirror $python_packages $pause_tag"; \
          cat "$pause_dir/linux/pause.c"; sha256sum < /bin/busybox; } | sha256sum | cut -c1-16)"
out="$images_cache/images-$key"
mkdir -p "$out"
export SOURCE_DATE_EPOCH=1700000000  # reproducible file times in the Debian tree and the image config

build_python_base() {
  local tree="$out/python-base.rootfs" c
  rm -rf "$tree"
  echo "building python-base from Debian $suite ($python_packages)" >&2
  # minbase: Essential packages + apt; no docs, man pages or locales; apt's lists removed afterwards.
  mmdebstrap --quiet --variant=minbase --include="$python_packages" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$suite" "$tree" "$mirror" >&2
  c="$(buildah from scratch)"
  buildah add --quiet "$c" "$tree" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd '["python3"]' --label org.opencontainers.image.description="Debian $suite + python3 (uds-vm-operator tests)" "$c"
  buildah commit --quiet --rm "$c" uds-test/python-base:latest >/dev/null
  rm -rf "$tree"
  buildah push --quiet uds-test/python-base:latest "oci-archive:$out/python-base.oci.tar.tmp:uds-test/python-base:latest"
  mv "$out/python-base.oci.tar.tmp" "$out/python-base.oci.tar"
}

build_pause() {
  local work c
  echo "building pause $pause_tag from $pause_dir/linux/pause.c" >&2
  work="$(mktemp -d)"
  gcc -Os -Wall -Werror -static -DVERSION="v${pause_tag}-uds" -o "$work/pause" "$pause_dir/linux/pause.c"
  strip "$work/pause"
  c="$(buildah from scratch)"
  buildah copy --quiet "$c" "$work/pause" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' --user 65535:65535 "$c"
  buildah commit --quiet --rm "$c" uds-test/pause:latest >/dev/null
  rm -rf "$work"
  buildah push --quiet uds-test/pause:latest "oci-archive:$out/pause.oci.tar.tmp:uds-test/pause:latest"
  mv "$out/pause.oci.tar.tmp" "$out/pause.oci.tar"
}

build_busybox() {
  local work c applet
  echo "building busybox from Debian's busybox-static" >&2
  work="$(mktemp -d)"
  mkdir -p "$work/bin" "$work/tmp" "$work/www"
  cp /bin/busybox "$work/bin/busybox"
  for applet in sh nc wget httpd cat echo ls sleep id env hostname ip true false; do
    ln -s busybox "$work/bin/$applet"
  done
  echo ok > "$work/www/index.html"
  c="$(buildah from scratch)"
  buildah copy --quiet "$c" "$work" / >/dev/null
  buildah config --env PATH=/bin --user 65532:65532 --cmd '["/bin/sh"]' "$c"
  buildah commit --quiet --rm "$c" uds-test/busybox:latest >/dev/null
  rm -rf "$work"
  buildah push --quiet uds-test/busybox:latest "oci-archive:$out/busybox.oci.tar.tmp:uds-test/busybox:latest"
  mv "$out/busybox.oci.tar.tmp" "$out/busybox.oci.tar"
}

start=$(date +%s)
[ -f "$out/python-base.oci.tar" ] || build_python_base
[ -f "$out/pause.oci.tar" ] || build_pause
[ -f "$out/busybox.oci.tar" ] || build_busybox
ensure_local uds-test/python-base:latest "$out/python-base.oci.tar"
ensure_local uds-test/pause:latest "$out/pause.oci.tar"
ensure_local uds-test/busybox:latest "$out/busybox.oci.tar"

reg="$(registry_addr)"
mkdir -p "$envtest_dir"
push_pinned uds-test/python-base:latest "$reg/uds-test/python-base:$key" > "$envtest_dir/python-base-image"
# containerd's sandbox_image is a tag reference: pause:3.10 (the minor tag the node's config names) and the
# full tag of the source (3.10.1) both point at the same digest.
push_pinned uds-test/pause:latest "$reg/pause:$pause_tag" >/dev/null
push_pinned uds-test/pause:latest "$reg/pause:${pause_tag%.*}" >/dev/null
echo "$reg/pause:${pause_tag%.*}" > "$envtest_dir/pause-image"
push_pinned uds-test/busybox:latest "$reg/uds-test/busybox:$key" > "$envtest_dir/busybox-image"
echo "base images ($out) pushed to $reg in $(( $(date +%s) - start )) s" >&2
