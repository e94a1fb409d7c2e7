#!/usr/bin/env bash
# Debian packages the guest tier needs: QEMU (boot), mmdebstrap + syslinux + dosfstools/mtools + fdisk + cpio (image
# build), xorriso (the NoCloud `cidata` ISO), openssh-client (the attacker), cloud-init (only for
# `cloud-init schema`), gpg + dpkg-deb (the signed loopback apt mirror). In this container nothing starts at install: /usr/sbin/policy-rc.d exits 101 and there
# is no systemd; where a systemd host runs this, /etc/cloud/cloud-init.disabled keeps cloud-init off at boot.
set -euo pipefail
need=(qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils mmdebstrap:mmdebstrap syslinux:syslinux
      mkfs.vfat:dosfstools mcopy:mtools sfdisk:fdisk xorrisofs:xorriso ssh:openssh-client
      ssh-keygen:openssh-client cloud-init:cloud-init gpg:gpg dpkg-deb:dpkg cpio:cpio)
missing=()
for pair in "${need[@]}"; do command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}"); done
[ -f /usr/lib/syslinux/mbr/mbr.bin ] || missing+=(syslinux-common)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "error: missing ${missing[*]}; install them with: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} (Debian packages) for the guest tier" >&2
mkdir -p /etc/cloud && touch /etc/cloud/cloud-init.disabled
for attempt in 1 2 3 4 5; do  # another engineer may hold the dpkg lock for a minute
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null && exit 0
  echo "apt-get failed (attempt $attempt); retrying in 20 s" >&2; sleep 20
done
exit 1
