#!/usr/bin/env bash
# `make zarf-init-package`: Zarf's init package, zarf-init-<arch>-<ZARF_VERSION>.tar.zst, built here because
# the public one cannot be fetched. Made from the init definition that ships in the Go module
# github.com/zarf-dev/zarf@ZARF_VERSION (its zarf.yaml and packages/zarf-agent, read from the module cache at
# build time, never committed), with the zarf agent image built locally:
# - the agent image is the zarf CLI of tools/zarf/build.sh run as `zarf internal agent` (what upstream's
#   Dockerfile does on a distroless base), made FROM scratch with buildah and pushed into the loopback
#   registry as REGISTRY/zarf-dev/zarf/agent:ZARF_VERSION;
# - the definition keeps the module's zarf-agent component and drops the others: k3s (a distro), the injector
#   and the seed/permanent registry (the module does not carry the injector's Rust source, its binary is a
#   download, and Zarf skips all three when `zarf init --registry-url` names an external registry, which is
#   how this package is used: with the loopback registry) and the optional git server (an upstream image).
# Writes the package into ~/.cache/uds-vm-operator/zarf-init-<version>-<key>/ and prints its path; warm runs
# with an unchanged zarf binary and definition only check that the agent image is in the registry.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=/dev/null
. "$root/versions.env"
# shellcheck source=tools/images/lib.sh
. "$root/tools/images/lib.sh"
zarf="$("$here/build.sh")"
module="$(cd "$here" && GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local go list -m -f '{{.Dir}}' github.com/zarf-dev/zarf)"
[ -f "$module/packages/zarf-agent/zarf.yaml" ] || die "github.com/zarf-dev/zarf@$ZARF_VERSION has no packages/zarf-agent"
arch="$(go env GOARCH)"
key="$( { sha256sum < "$zarf"; find "$module/packages/zarf-agent" -type f -print0 | sort -z | xargs -0 cat; cat "$0"; } \
        | sha256sum | cut -c1-16)"
dest="$images_cache/zarf-init-${ZARF_VERSION}-$key"
pkg="$dest/zarf-init-$arch-${ZARF_VERSION}.tar.zst"
registry="$(registry_addr)"
agent_repo="zarf-dev/zarf/agent"
local_name="localhost/zarf-agent:${ZARF_VERSION}-$key"

# The agent image (cached as an OCI archive beside the package).
archive="$dest/agent.oci.tar"
mkdir -p "$dest"
if [ ! -f "$archive" ]; then
  rootfs="$(mktemp -d)"
  trap 'rm -rf "$rootfs"' EXIT
  mkdir -p "$rootfs/tmp" "$rootfs/etc"
  chmod 1777 "$rootfs/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$rootfs/etc/group"
  install -m 0755 "$zarf" "$rootfs/zarf"
  ctr="$(buildah from scratch)"
  buildah add --quiet "$ctr" "$rootfs" / >/dev/null
  buildah config --user 65532:65532 --cmd '["/zarf","internal","agent","--log-level=info","--log-format=console","--no-color"]' \
    --label "org.opencontainers.image.version=${ZARF_VERSION}" "$ctr"
  buildah commit --quiet --timestamp "${SOURCE_DATE_EPOCH:-1700000000}" "$ctr" "$local_name" >/dev/null
  buildah rm "$ctr" >/dev/null
  buildah push --quiet "$local_name" "oci-archive:$archive.tmp:$local_name"
  mv "$archive.tmp" "$archive"
fi
ensure_local "$local_name" "$archive"
push_pinned "$local_name" "$registry/$agent_repo:${ZARF_VERSION}" > "$dest/agent-image"

if [ ! -s "$pkg" ]; then
  def="$(mktemp -d)"
  trap 'rm -rf "$def" "${rootfs:-}"' EXIT
  mkdir -p "$def/packages"
  cp -r "$module/packages/zarf-agent" "$def/packages/"
  chmod -R u+w "$def"
  cat > "$def/zarf.yaml" <<YAML
kind: ZarfInitConfig
metadata:
  name: init
  description: Zarf init for an external registry (zarf-agent only; built by uds-vm-operator tools/zarf/init-package.sh)
components:
  - name: zarf-agent
    required: true
    import:
      path: packages/zarf-agent
YAML
  tmp="$(mktemp -d)"
  "$zarf" package create "$def" --confirm -o "$dest" --zarf-cache "$images_cache/zarf-home/cache" --tmpdir "$tmp" \
    --set AGENT_IMAGE_DOMAIN=ghcr.io/ --set AGENT_IMAGE="$agent_repo" --set AGENT_IMAGE_TAG="${ZARF_VERSION}" \
    --registry-override "ghcr.io/$agent_repo=$registry/$agent_repo" --log-format console --no-color >&2
  rm -rf "$tmp"
  [ -s "$pkg" ] || die "zarf did not write $pkg"
fi
echo "$pkg"
