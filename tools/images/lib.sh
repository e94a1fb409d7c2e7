# Shared by tools/images/*.sh (sourced): where images are cached, which container storage buildah uses,
# and the local registry they are pushed to. Nothing here is pulled from outside: every image is made from
# Debian packages or from this repository.
# shellcheck shell=bash
images_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
images_cache="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator"
envtest_dir="${ENVTEST_DIR:-$images_root/.envtest}"
# buildah as root with the vfs driver (overlay-in-overlay is not available everywhere), in a storage of its
# own so that our images and working containers never mix with anyone else's.
export STORAGE_DRIVER=vfs
images_storage="$images_cache/buildah-storage"
mkdir -p "$images_storage/root" "$images_storage/run"
cat > "$images_storage/storage.conf" <<CONF
[storage]
driver = "vfs"
graphroot = "$images_storage/root"
runroot = "$images_storage/run"
CONF
export CONTAINERS_STORAGE_CONF="$images_storage/storage.conf"

# One image script at a time per cache: `make test` runs the build tier and the node tier at once, and both
# may ask for the same uncached image (the operator's, its python base); the second waits, then finds it
# cached, instead of building it again into the same archive. A script called by one that holds the lock
# (image.sh runs base.sh) inherits it: the variable says so, and the open descriptor keeps it held.
if [ -z "${UDS_IMAGES_LOCK_HELD:-}" ]; then
  exec {images_lock_fd}>"$images_cache/.images.lock"
  if ! flock --nonblock "$images_lock_fd"; then
    echo "waiting for another image build using $images_cache" >&2
    flock "$images_lock_fd"
  fi
  export UDS_IMAGES_LOCK_HELD=1
fi

die() { echo "error: $*" >&2; exit 1; }

# The registry address (127.0.0.1:PORT, plain HTTP) from .envtest/registry; it must answer.
registry_addr() {
  local file="$envtest_dir/registry" addr
  [ -s "$file" ] || die "$file is missing: start the local registry first (make image-registry or make node-up)"
  addr="$(tr -d '[:space:]' < "$file")"
  curl -fsS --max-time 5 "http://$addr/v2/" >/dev/null || die "the registry at $addr (from $file) does not answer"
  echo "$addr"
}

# Make sure image NAME is in buildah's storage, loading it from its OCI archive when the storage was wiped.
ensure_local() {
  local name="$1" archive="$2"
  buildah inspect --type image "$name" >/dev/null 2>&1 && return 0
  [ -f "$archive" ] || die "neither image $name nor its archive $archive exists"
  local id
  id="$(buildah pull --quiet "oci-archive:$archive" | tail -1)"
  buildah tag "$id" "$name"
  buildah inspect --type image "$name" >/dev/null 2>&1 || die "could not load $archive as $name"
}

# Push local image NAME to REF in the plain-HTTP registry; prints REF@sha256:... (the digest the registry holds).
push_pinned() {
  local name="$1" ref="$2" digestfile
  digestfile="$(mktemp)"
  buildah push --quiet --tls-verify=false --digestfile "$digestfile" "$name" "docker://$ref" >/dev/null
  echo "${ref%:*}@$(cat "$digestfile")"
  rm -f "$digestfile"
}
