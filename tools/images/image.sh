#!/usr/bin/env bash
# `make image`: build the operator's image from the repo's Dockerfile with buildah (chroot isolation, vfs),
# FROM the Debian-made python base (tools/images/base.sh), offline: the locked wheels are downloaded on the
# host into ~/.cache/uds-vm-operator/wheelhouse-<locks hash> and copied into the build context. Pushes the
# image into the local registry and writes its reference with digest to .envtest/operator-image
# (REGISTRY/uds-vm-operator@sha256:...) and the tag reference to .envtest/operator-image-tag.
# Cache: the image is kept as an OCI archive under ~/.cache/uds-vm-operator/operator-image-<inputs hash>/;
# with unchanged inputs (tracked files the Dockerfile copies, the locks, the base image's digest) a warm run
# only pushes. OPERATOR_IMAGE_TAG overrides the tag (default: the inputs hash).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=tools/images/lib.sh
. "$here/lib.sh"
cd "$images_root"
"$here/base.sh"
base_ref="$(cat "$envtest_dir/python-base-image")"
base_digest="${base_ref##*@}"

# The build context: only tracked files the Dockerfile copies (no .venv, no egg-info), plus the wheelhouse.
mapfile -t files < <(git ls-files -- Dockerfile pyproject.toml README.md requirements.lock requirements-build.lock src wheelhouse)
locks_key="$(cat requirements.lock requirements-build.lock | sha256sum | cut -c1-16)"
key="$( { for f in "${files[@]}"; do printf '%s\0' "$f"; cat "$f"; done; echo "$base_digest"; cat "$here/image.sh"; } \
        | sha256sum | cut -c1-16)"
tag="${OPERATOR_IMAGE_TAG:-$key}"
out="$images_cache/operator-image-$key"
archive="$out/operator.oci.tar"
name="localhost/uds-vm-operator:$key"
start=$(date +%s)

if [ ! -f "$archive" ]; then
  wheels="$images_cache/wheelhouse-$locks_key"
  if [ ! -f "$wheels/.complete" ]; then
    echo "downloading the locked wheels into $wheels" >&2
    "$images_root/.venv/bin/python" "$images_root/release/locks.py" wheelhouse "$wheels"
    touch "$wheels/.complete"
  fi
  ctx="$(mktemp -d)"
  trap 'rm -rf "$ctx"' EXIT
  tar -cf - "${files[@]}" | tar -xf - -C "$ctx"
  mkdir -p "$ctx/wheelhouse" && cp "$wheels"/*.whl "$ctx/wheelhouse/"
  echo "building $name FROM $base_ref (offline)" >&2
  # The base is pulled from the loopback registry (plain HTTP) by digest first; then the build runs in a
  # network namespace of its own with no interface up: it cannot reach anything, PyPI included.
  buildah pull --quiet --tls-verify=false "$base_ref" >/dev/null
  unshare --net buildah bud --quiet --isolation chroot --pull-never \
    --build-arg PYTHON_IMAGE="$base_ref" --timestamp "${SOURCE_DATE_EPOCH:-1700000000}" \
    --layers=false -t "$name" -f "$ctx/Dockerfile" "$ctx" >&2
  mkdir -p "$out"
  buildah push --quiet "$name" "oci-archive:$archive.tmp:$name"
  mv "$archive.tmp" "$archive"
  echo "built in $(( $(date +%s) - start )) s" >&2
  # Every source change makes a new image (an archive of ~100 MB and a full vfs copy of ~300 MB in buildah's
  # storage). Keep the newest three (checkouts and worktrees share this cache), so the cache does not grow
  # with every commit.
  mapfile -t stale < <(ls -dt "$images_cache"/operator-image-* 2>/dev/null | tail -n +4)
  for dir in "${stale[@]}"; do
    buildah rmi --force "localhost/uds-vm-operator:${dir##*/operator-image-}" >/dev/null 2>&1 || true
    rm -rf "$dir"
  done
fi
ensure_local "$name" "$archive"
reg="$(registry_addr)"
ref="$(push_pinned "$name" "$reg/uds-vm-operator:$tag")"
echo "$ref" > "$envtest_dir/operator-image"
echo "$reg/uds-vm-operator:$tag" > "$envtest_dir/operator-image-tag"
echo "$archive" > "$envtest_dir/operator-image-archive"
echo "$name" > "$envtest_dir/operator-image-local"  # the name in the project's buildah storage
echo "operator image $ref (${SECONDS} s)" >&2
echo "$ref"
