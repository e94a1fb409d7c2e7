#!/usr/bin/env bash
# The Debian packages the image builds need (tools/images/): buildah and mmdebstrap to make images, gcc for
# the pause binary, busybox-static for the test image, docker-registry for a local registry, curl to probe it.
set -euo pipefail
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v docker-registry >/dev/null || missing+=(docker-registry)
command -v curl >/dev/null || missing+=(curl)
{ [ -x /bin/busybox ] && /bin/busybox --list | grep -x httpd >/dev/null; } || missing+=(busybox-static)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "error: missing ${missing[*]}; install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} (Debian packages) for the image builds" >&2
apt-get update -qq >/dev/null
for attempt in 1 2 3 4 5; do  # another engineer's apt may hold the dpkg lock for a minute
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null && exit 0
  sleep $(( attempt * 10 ))
done
exit 1
