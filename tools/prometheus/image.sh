#!/usr/bin/env bash
# A real Prometheus for the node tier: Debian bookworm's `prometheus` package on a minbase root (mmdebstrap, from
# the archive this machine's apt uses: tools/debian-archive.sh), as an OCI image that runs as Debian's own
# `prometheus` system user (numeric, so a pod's runAsNonRoot can check it) with entrypoint /usr/bin/prometheus.
# Kept as an OCI archive in ~/.cache/uds-vm-operator/prometheus-image-<hash of this script, the suite, the
# archive and the packages>; a warm run only checks a stamp file.
#
# Usage: tools/prometheus/image.sh                    prints the OCI archive's path
#        tools/prometheus/image.sh --push REGISTRY    also pushes it to REGISTRY (plain HTTP, loopback) as
#                                                     uds-test/prometheus:<Debian version> and prints the pulled
#                                                     reference instead: REGISTRY/uds-test/prometheus:TAG@sha256:...
# tests/node/prometheus_pod.py runs the second form with the node's registry (.envtest/registry or the
# session's state dir), as tools/cdi/install.py does for CDI's images.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
push=""
if [ "${1:-}" = --push ]; then push="${2:?--push needs a registry address}"; fi
suite=bookworm
packages=(prometheus)
mirror="$("$root/tools/debian-archive.sh")"
key="$( { cat "$0"; echo "$suite $mirror ${packages[*]}"; } | sha256sum | cut -c1-16)"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator"
cache="$cache_root/prometheus-image-$key"
archive="$cache/prometheus.oci.tar"
stamp="$cache/.built"
local_name="localhost/uds-test/prometheus:$key"
# buildah keeps its own storage under the cache (the one tools/images and tools/cdi use), never the machine's.
store="$cache_root/buildah-storage"
bh() { buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs "$@"; }

# One build (or push) per cache at a time: the main checkout, worktrees and a running test tier share ~/.cache;
# a second caller waits, then finds the archive built.
mkdir -p "$cache_root"
exec {lock_fd}>"$cache_root/.prometheus-image.lock"
if ! flock --nonblock "$lock_fd"; then
  echo "waiting for another Prometheus image build using $cache_root" >&2
  flock "$lock_fd"
fi

if [ ! -f "$stamp" ]; then
  for tool in mmdebstrap buildah; do
    command -v "$tool" >/dev/null || { echo "error: $tool missing; run make image-deps" >&2; exit 1; }
  done
  [ "$(id -u)" -eq 0 ] || { echo "error: building the Prometheus image needs root (mmdebstrap, buildah)" >&2; exit 1; }
  start=$(date +%s)
  rm -rf "$cache"
  mkdir -p "$cache"
  echo "building the Prometheus image (Debian $suite: ${packages[*]}) into $cache" >&2
  # No docs, manuals or locales, nor moment-timezone's 212 MB of per-zone source data (the web UI loads its
  # bundled with-data files); apt's lists and caches are dropped. The package's postinst made the
  # `prometheus` system user; /prometheus is the TSDB path the pod mounts an emptyDir on.
  # shellcheck disable=SC2016 # the hooks' $1 is mmdebstrap's root, expanded by the hook's shell
  mmdebstrap --quiet --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" --format=tar \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/javascript/moment-timezone/data/*' \
    --customize-hook='mkdir -p "$1/prometheus" && chroot "$1" chown prometheus:prometheus /prometheus' \
    --customize-hook="chroot \"\$1\" id -u prometheus > $(printf %q "$cache/uid")" \
    --customize-hook="chroot \"\$1\" id -g prometheus > $(printf %q "$cache/gid")" \
    --customize-hook="chroot \"\$1\" dpkg-query -W -f='\${Version}' prometheus > $(printf %q "$cache/version")" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$suite" "$cache/rootfs.tar.part" "deb $mirror $suite main" "deb $mirror $suite-updates main" >&2
  mv "$cache/rootfs.tar.part" "$cache/rootfs.tar"
  uid="$(cat "$cache/uid")"; gid="$(cat "$cache/gid")"; version="$(cat "$cache/version")"
  [ "$uid" -gt 0 ] || { echo "error: the prometheus user has uid $uid" >&2; exit 1; }
  c="$(bh from --quiet scratch)"
  bh add --quiet "$c" "$cache/rootfs.tar" / >/dev/null
  bh config --user "$uid:$gid" --entrypoint '["/usr/bin/prometheus"]' \
    --cmd '["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]' \
    --workingdir /prometheus --port 9090/tcp \
    --label "org.opencontainers.image.title=prometheus" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.source=Debian $suite prometheus $version" "$c"
  bh commit --quiet --rm "$c" "$local_name" >/dev/null
  bh push --quiet "$local_name" "oci-archive:$archive.part:uds-test/prometheus:$key" >&2
  mv "$archive.part" "$archive"
  rm -f "$cache/rootfs.tar"
  # Registry tags allow [A-Za-z0-9_.-]: Debian's `+` becomes `_`.
  echo "${version//[^A-Za-z0-9_.-]/_}" > "$cache/tag"
  echo "prometheus=$version uid=$uid gid=$gid key=$key" > "$stamp"
  echo "  image prometheus ($version): $(( $(date +%s) - start )) s" >&2
fi

if [ -z "$push" ]; then
  echo "$archive"
  exit 0
fi
# buildah's storage may have been wiped since the build: load the image from its archive first.
if ! bh inspect --type image "$local_name" >/dev/null 2>&1; then
  id="$(bh pull --quiet "oci-archive:$archive" | tail -1)"
  bh tag "$id" "$local_name"
fi
ref="$push/uds-test/prometheus:$(cat "$cache/tag")"
digestfile="$(mktemp)"
trap 'rm -f "$digestfile"' EXIT
bh push --quiet --tls-verify=false --digestfile "$digestfile" "$local_name" "docker://$ref" >&2
echo "$ref@$(cat "$digestfile")"
