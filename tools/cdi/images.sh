#!/usr/bin/env bash
# Pack CDI's binaries (tools/cdi/build.sh) into OCI images whose root filesystems come from Debian's packages,
# cached as OCI archives outside the clone; with `--push REGISTRY` also push them there (plain HTTP, loopback).
#
# Two bases, so the registry and containerd share their layers: `min` (ca-certificates; for the operator,
# controller, apiserver and uploadproxy, which only speak HTTP(S)) and `worker` (+ qemu-img, nbdkit with its curl
# plugin and gzip/xz filters, libnbd, curl; for the importer, upload server and cloner, which run those tools).
# Entry points and the user (1001; CDI's controller runs worker pods as 107) follow CDI's own image definitions.
# Prints the folder of OCI archives on stdout; a warm run only checks a stamp file (and pushes if asked).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
push=""
[ "${1:-}" = --push ] && push="${2:?--push needs a registry address}"
bin="$("$here/build.sh")"
min_pkgs="ca-certificates"
worker_pkgs="ca-certificates,qemu-utils,nbdkit,libnbd0,curl,xz-utils"
names=(cdi-operator cdi-controller cdi-apiserver cdi-uploadproxy cdi-importer cdi-uploadserver cdi-cloner)
key="$( (cat "$here/images.sh" "$here/images/cloner-start.sh" "$bin/.stamp"; echo "$min_pkgs $worker_pkgs") | sha256sum | cut -c1-12)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/cdi-images-${CDI_VERSION}-${key}"
stamp="$cache/.stamp"
# buildah keeps its own storage under the cache, so it never touches another user's images.
store="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/buildah-storage"
bh() { buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs "$@"; }
ref() { echo "uds-vm-operator/$1:${CDI_VERSION}"; }

if [ ! -f "$stamp" ]; then
  for c in mmdebstrap buildah; do
    command -v "$c" >/dev/null || { echo "error: $c is required (apt-get install mmdebstrap buildah)" >&2; exit 1; }
  done
  start=$(date +%s)
  mkdir -p "$cache/rootfs"
  # Docs, manuals and locales are not needed in a worker image; apt's lists are dropped after the install.
  slim=(--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*'
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*')
  for base in min worker; do
    pk="$min_pkgs"; [ $base = worker ] && pk="$worker_pkgs"
    [ -f "$cache/rootfs/$base.tar" ] && continue
    echo "mmdebstrap bookworm ($base: $pk)" >&2
    mmdebstrap --quiet --variant=minbase --include="$pk" "${slim[@]}" bookworm "$cache/rootfs/$base.tar.tmp" >&2
    mv "$cache/rootfs/$base.tar.tmp" "$cache/rootfs/$base.tar"
  done
  for base in min worker; do
    c=$(bh from --quiet scratch)
    bh add --quiet "$c" "$cache/rootfs/$base.tar" / >/dev/null
    bh commit --quiet --rm "$c" "uds-vm-operator/cdi-base-$base:${CDI_VERSION}" >/dev/null
  done
  for n in "${names[@]}"; do
    base=min; entry="[\"/usr/bin/$n\", \"-alsologtostderr\"]"
    case "$n" in
      cdi-operator) entry='["/usr/bin/cdi-operator"]' ;;
      cdi-importer | cdi-uploadserver) base=worker ;;
      cdi-cloner) base=worker; entry='["/usr/local/bin/cloner-start.sh"]' ;;
    esac
    c=$(bh from --quiet --pull-never "uds-vm-operator/cdi-base-$base:${CDI_VERSION}")
    bh copy --quiet --chmod 0755 "$c" "$bin/$n" /usr/bin/ >/dev/null
    # CDI's controller sizes a size-less clone with a pod that runs /usr/bin/cdi-image-size-detection (qemu-img
    # info on the source disk) from the importer image; without it that pod never starts and the clone waits.
    [ "$n" = cdi-importer ] && bh copy --quiet --chmod 0755 "$c" "$bin/cdi-image-size-detection" /usr/bin/ >/dev/null
    [ "$n" = cdi-cloner ] && bh copy --quiet --chmod 0755 "$c" "$here/images/cloner-start.sh" /usr/local/bin/ >/dev/null
    bh config --entrypoint "$entry" --cmd '' --user 1001 --workingdir "/home/$n" \
      --label "org.opencontainers.image.version=${CDI_VERSION}" "$c"
    bh commit --quiet --rm "$c" "$(ref "$n")" >/dev/null
    rm -f "$cache/$n.oci.tar"
    bh push --quiet "$(ref "$n")" "oci-archive:$cache/$n.oci.tar:$(ref "$n")" >&2
  done
  rm -rf "$cache/rootfs"
  echo "cdi=${CDI_VERSION} key=${key}" > "$stamp"
  echo "images built in $(( $(date +%s) - start )) s" >&2
fi

if [ -n "$push" ]; then
  pushed="$cache/.pushed-$(echo "$push" | tr ':/' '__')"
  # A registry restarted with empty storage loses the images: check one manifest before trusting the marker.
  if [ -f "$pushed" ] && curl -fsS -o /dev/null \
       -H 'Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json' \
       "http://$push/v2/uds-vm-operator/cdi-importer/manifests/${CDI_VERSION}"; then
    :
  else
    for n in "${names[@]}"; do
      bh inspect --type image "$(ref "$n")" >/dev/null 2>&1 || bh pull --quiet "oci-archive:$cache/$n.oci.tar" >/dev/null
      bh push --quiet --tls-verify=false "$(ref "$n")" "docker://$push/$(ref "$n")" >&2
    done
    touch "$pushed"
  fi
fi
echo "$cache"
