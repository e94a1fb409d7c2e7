#!/usr/bin/env bash
# Build KubeVirt's node half (KUBEVIRT_VERSION, versions.env) from its Go module: virt-handler, virt-launcher and
# the tools its pod runs (virt-launcher-monitor, virt-tail, virt-freezer, virt-probe, libvirt-hook-client),
# virt-chroot and container-disk. They link libvirt and libnbd through cgo, and the versions KubeVirt v1.8.4 needs
# (libvirt 11.3, libnbd 1.22) are Debian trixie's, which cannot be installed on the bookworm host: the build runs
# in a trixie root made by mmdebstrap from the archive this machine's apt uses (reference: real-kubevirt-boot.md).
#
#  - The root, the Go module cache and the Go build cache live outside the clone; the build cache is the host's
#    own (`go env GOCACHE`), so virt-api/virt-controller (tools/kubevirt/build.sh) and these share compiled
#    packages. The mounts are made in a private mount namespace (`unshare -m`) and vanish with it.
#  - The module is KubeVirt's own source (its replace directives only apply to the main module), copied once;
#    its staging modules are not in the module zip, so kubevirt.io/api and client-go point at their tags.
#  - libnbd's Go binding is not served by the Go proxy; it is the `golang/` folder of trixie's libnbd source
#    package, with its C helper `freeCallbackId` renamed: libvirt's Go binding exports the same symbol and the
#    two would not link into one binary.
# Prints the bin folder on stdout; a warm run only checks a stamp file. Progress and timings go to stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator"
build_pkgs="gcc,libc6-dev,pkg-config,libvirt-dev,libnbd-dev,ca-certificates,dpkg-dev,xz-utils"
key="$( (cat "$here/build-node.sh" "$here/go.sum"; echo "$build_pkgs") | sha256sum | cut -c1-12)"
cache="$cache_root/kubevirt-node-${KUBEVIRT_VERSION}-${key}"
bin="$cache/bin"
stamp="$bin/.stamp"
go_components=(virt-handler virt-launcher virt-launcher-monitor virt-tail virt-freezer virt-probe virt-chroot)
all=("${go_components[@]}" virt-libvirt-hook-client container-disk)
want="kubevirt=${KUBEVIRT_VERSION} key=${key}"
warm=1
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] || warm=0
for name in "${all[@]}"; do [ -x "$bin/$name" ] || warm=0; done
if [ "$warm" = 1 ]; then
  echo "$bin"
  exit 0
fi
for c in go mmdebstrap unshare chroot; do
  command -v "$c" >/dev/null || { echo "error: $c is required to build KubeVirt's node half (make image-deps; Go >= 1.24)" >&2; exit 1; }
done
start=$(date +%s)
archive="$("$root/tools/debian-archive.sh")"
# The build root: trixie's compilers and headers, made once per package list.
broot="$cache_root/trixie-buildroot-$(echo "$build_pkgs $archive" | sha256sum | cut -c1-12)"
if [ ! -f "$broot/.complete" ]; then
  rm -rf "$broot"
  t=$(date +%s)
  mmdebstrap --quiet --variant=apt --include="$build_pkgs" trixie "$broot" \
    "deb $archive trixie main" "deb-src $archive trixie main" >&2
  touch "$broot/.complete"
  echo "  trixie build root: $(( $(date +%s) - t )) s" >&2
fi
gomodcache="$(go env GOMODCACHE)"
gocache="$(go env GOCACHE)"
goroot="$(go env GOROOT)"
# KubeVirt's source as the main module, with the libnbd binding beside it.
(cd "$here" && GOFLAGS=-mod=readonly GOWORK=off go mod download kubevirt.io/kubevirt) >&2
src_dir="$(cd "$here" && GOFLAGS=-mod=readonly GOWORK=off go list -m -f '{{.Dir}}' kubevirt.io/kubevirt)"
work="$cache/work"
rm -rf "$work" && mkdir -p "$work" "$bin"
cp -r "$src_dir" "$work/kubevirt" && chmod -R u+w "$work/kubevirt"
nbd="$work/libnbd"
mkdir -p "$nbd"
unshare -m --propagation private bash -c '
  set -euo pipefail
  broot="$1"; nbd="$2"
  mkdir -p "$broot/work"
  mount --bind "$nbd" "$broot/work"
  cp /etc/resolv.conf "$broot/etc/resolv.conf"
  chroot "$broot" bash -c "apt-get update -qq && cd /work && apt-get source -qq --download-only libnbd && dpkg-source -x --skip-debianization libnbd_*.dsc src >/dev/null"
' _ "$broot" "$nbd" >&2
binding="$nbd/src/golang"
[ -f "$binding/go.mod" ] || { echo "error: trixie's libnbd source has no golang/ binding at $binding" >&2; exit 1; }
grep -rl freeCallbackId "$binding" | xargs sed -i 's/freeCallbackId/nbdFreeCallbackId/g'
mod="$work/kubevirt"
# The staging modules at their tags; their sums come from the tools module's go.sum (checked, committed).
cat "$here/go.sum" >> "$mod/go.sum"
(cd "$mod" && GOWORK=off go mod edit \
  -replace kubevirt.io/api=kubevirt.io/api@"${KUBEVIRT_VERSION}" \
  -replace kubevirt.io/client-go=kubevirt.io/client-go@"${KUBEVIRT_VERSION}" \
  -replace libguestfs.org/libnbd=/work/libnbd/src/golang)
cp -L /etc/ssl/certs/ca-certificates.crt "$work/ca.crt"
ver="-X kubevirt.io/client-go/version.gitVersion=${KUBEVIRT_VERSION}"
echo "building KubeVirt ${KUBEVIRT_VERSION} node half (${all[*]}) in a trixie root; about 10-12 min cold on 2 cores" >&2
unshare -m --propagation private bash -c '
  set -euo pipefail
  broot="$1"; work="$2"; goroot="$3"; gomodcache="$4"; gocache="$5"; ver="$6"; shift 6
  for d in /work /usr/local/go /gomod /gocache /out; do mkdir -p "$broot$d"; done
  mount --bind "$work" "$broot/work"
  mount --bind -o ro "$goroot" "$broot/usr/local/go"
  mount --bind "$gomodcache" "$broot/gomod"
  mount --bind "$gocache" "$broot/gocache"
  mount --bind /dev "$broot/dev"
  mount -t proc proc "$broot/proc"
  cp /etc/resolv.conf "$broot/etc/resolv.conf"
  chroot "$broot" env -i PATH=/usr/local/go/bin:/usr/bin:/bin HOME=/root GOMODCACHE=/gomod GOCACHE=/gocache \
    GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=mod -gcflags=all=-dwarf=false" GONOSUMDB=libguestfs.org \
    GOPROXY="${GOPROXY:-https://proxy.golang.org}" SSL_CERT_FILE=/work/ca.crt CGO_ENABLED=1 \
    bash -c "
      set -euo pipefail
      cd /work/kubevirt
      mkdir -p /work/bin
      for name in $*; do
        t=\$(date +%s)
        go build -trimpath -ldflags \"-s -w $ver\" -o /work/bin/\$name ./cmd/\$name
        echo \"  \$name: \$(( \$(date +%s) - t )) s\"
      done
      go build -trimpath -ldflags \"-s -w $ver\" -o /work/bin/virt-libvirt-hook-client ./cmd/virt-launcher/libvirt-hook-client
      gcc -static -O2 -o /work/bin/container-disk cmd/container-disk-v2alpha/main.c
    "
' _ "$broot" "$work" "$goroot" "$gomodcache" "$gocache" "$ver" "${go_components[@]}" >&2
for name in "${all[@]}"; do install -m 0755 "$work/bin/$name" "$bin/$name"; done
# KubeVirt's own launcher configuration files travel with the binaries (the image build copies them).
mkdir -p "$bin/launcher-config"
for f in qemu.conf virtqemud.conf nsswitch.conf qemu node-labeller/node-labeller.sh; do
  install -m 0644 "$mod/cmd/virt-launcher/$f" "$bin/launcher-config/$(basename "$f")"
done
rm -rf "$work/kubevirt" "$work/bin"
echo "$want" > "$stamp"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
