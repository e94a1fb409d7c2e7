#!/usr/bin/env bash
# CDI's importer and upload server link libnbd (cgo) and the importer image needs its source's Go bindings:
# make sure libnbd-dev is installed and Debian's source index (a deb-src entry for bookworm) is available.
# Idempotent; installs only as root, otherwise says what to run.
set -euo pipefail
srcs=/etc/apt/sources.list.d/uds-vm-operator-src.sources
need_dev=0
dpkg-query -W -f='${Status}' libnbd-dev 2>/dev/null | grep -q 'install ok installed' || need_dev=1
need_src=0
[ -f "$srcs" ] || need_src=1
[ "$need_dev$need_src" = 00 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "error: CDI's build needs libnbd-dev and a bookworm deb-src entry; as root run tools/cdi/ensure-libnbd.sh" >&2
  exit 1
fi
if [ "$need_src" = 1 ]; then
  archive="$("$(dirname "$0")/../debian-archive.sh")"
  cat > "$srcs" <<EOF
# Added by uds-vm-operator (tools/cdi/ensure-libnbd.sh): Debian source packages, for libnbd's Go bindings.
Types: deb-src
URIs: $archive
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
fi
echo "installing libnbd-dev and Debian's source index for CDI's build" >&2
for i in 1 2 3 4 5; do
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libnbd-dev >/dev/null && exit 0
  echo "apt busy (another engineer may hold the dpkg lock); retry $i/5" >&2
  sleep 20
done
exit 1
