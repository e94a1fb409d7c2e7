#!/usr/bin/env bash
# Build CDI's binaries (operator, controller, apiserver, uploadproxy, cloner, importer, uploadserver, the
# image-size detector that CDI runs from the importer image to size a clone whose DataVolume names no size, and the
# manifest-generator that renders the operator's install manifests) from the pinned
# kubevirt.io/containerized-data-importer Go module into a cache outside the clone, like tools/envtest/build.sh.
#
# Why a tools module (tools/cdi/gomod): CDI's go.mod carries `replace` directives that only apply when CDI is the
# main module, so we repeat them (its staging API pointed at the published containerized-data-importer-api tag,
# the malformed dynamic-resource-allocation line dropped) and copy CDI's go.sum, which also spares look-ups the
# checksum database refuses. The importer and upload server link libnbd through cgo; the Go proxy refuses
# libguestfs.org/libnbd, so its Go bindings come from Debian's *source* package of libnbd (the same version as
# the libnbd-dev we link against), and the module is built from a copy in the cache with a `replace` to them.
# Prints the bin folder on stdout; a warm run only checks a stamp file.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
key="$(cat "$here/gomod/go.mod" "$here/gomod/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/cdi-${CDI_VERSION}-${key}"
bin="$cache/bin"
stamp="$bin/.stamp"
tools=(cdi-operator cdi-controller cdi-apiserver cdi-uploadproxy cdi-cloner cdi-importer cdi-uploadserver cdi-image-size-detection
       manifest-generator)
want="cdi=${CDI_VERSION} libnbd=${CDI_LIBNBD_DEBIAN_VERSION} key=${key}"
warm=1
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] || warm=0
for t in "${tools[@]}"; do [ -x "$bin/$t" ] || warm=0; done
if [ "$warm" = 1 ]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "error: Go is required to build CDI (install Go >= 1.24)" >&2; exit 1; }
grep -q "kubevirt.io/containerized-data-importer ${CDI_VERSION}" "$here/gomod/go.mod" \
  || { echo "error: tools/cdi/gomod/go.mod does not pin CDI ${CDI_VERSION} (versions.env)" >&2; exit 1; }
start=$(date +%s)
"$here/ensure-libnbd.sh" >&2
nbd_src="$cache/src/libnbd-${CDI_LIBNBD_DEBIAN_VERSION}"
if [ ! -f "$nbd_src/golang/go.mod" ]; then
  rm -rf "$cache/src/dl" "$nbd_src" && mkdir -p "$cache/src/dl" "$nbd_src"
  (cd "$cache/src/dl" && apt-get source --download-only "libnbd=${CDI_LIBNBD_DEBIAN_VERSION}" >/dev/null 2>&1) \
    || { echo "error: apt-get source libnbd=${CDI_LIBNBD_DEBIAN_VERSION} failed (needs the deb-src entry tools/cdi/ensure-libnbd.sh adds)" >&2; exit 1; }
  tar xzf "$cache/src/dl/libnbd_${CDI_LIBNBD_DEBIAN_VERSION%-*}.orig.tar.gz" -C "$nbd_src" --strip-components=1 \
    "libnbd-${CDI_LIBNBD_DEBIAN_VERSION%-*}/golang"
fi
work="$cache/module"
rm -rf "$work" && mkdir -p "$work" "$bin"
cp "$here/gomod/go.mod" "$here/gomod/go.sum" "$work/"
(cd "$work" && GOWORK=off go mod edit -replace "libguestfs.org/libnbd=$nbd_src/golang")
# shellcheck source=/dev/null
. "$root/tools/go-build-env.sh"
ver="-X kubevirt.io/containerized-data-importer/pkg/version.gitVersion=${CDI_VERSION}"
echo "building CDI ${CDI_VERSION} into $bin; a cold build takes a few minutes" >&2
for t in "${tools[@]}"; do
  cgo=0
  case "$t" in cdi-importer | cdi-uploadserver | cdi-image-size-detection) cgo=1 ;; esac
  pkg="cmd/$t"
  case "$t" in manifest-generator | cdi-image-size-detection) pkg="tools/$t" ;; esac
  (cd "$work" && CGO_ENABLED=$cgo go build -trimpath -ldflags "-s -w $ver" -o "$bin/$t" \
    "kubevirt.io/containerized-data-importer/$pkg") >&2
done
echo "$want" > "$stamp"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
