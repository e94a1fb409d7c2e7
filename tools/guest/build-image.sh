#!/usr/bin/env bash
# Build (or reuse) the Debian bookworm guest image the guest tier boots: a whole disk (MBR + syslinux on a small
# FAT partition + ext4 root) that starts under a plain `qemu-system-x86_64 -drive file=...,if=virtio`.
# Made from Debian packages only (mmdebstrap minbase + what cloud-init, sshd and the hardening need), without
# loop devices or mounts: mkfs.ext4 -d / mkfs.vfat -F 16 --offset write straight into the disk file.
# Cached in ~/.cache/uds-vm-operator/guest-<hash of this script + the pins>; quick when warm (stamp file).
# Prints the cache directory on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck disable=SC1091
source "$repo/versions.env"
suite="${GUEST_DEBIAN_SUITE:?GUEST_DEBIAN_SUITE missing from versions.env}"
mirror="${GUEST_DEBIAN_MIRROR:-$("$(dirname "$0")/../debian-archive.sh")}"
[ -n "$mirror" ] || { echo "error: no Debian archive in /etc/apt/sources.list*; set GUEST_DEBIAN_MIRROR" >&2; exit 1; }
# Networking is systemd-networkd + systemd-resolved (cloud-init's networkd renderer), not ifupdown + dhclient:
# no `udevadm settle` before the network, a DHCP lease in C instead of dhclient-script's shell under emulation
# (docs/adr/0017-guest-boot-under-emulation.md).
packages=(
  linux-image-cloud-amd64 initramfs-tools systemd-sysv udev dbus
  cloud-init openssh-server unattended-upgrades qemu-guest-agent
  sudo auditd systemd-resolved iproute2 procps prometheus-node-exporter
)
key="$( { cat "$0"; echo "$suite $mirror ${packages[*]}"; } | sha256sum | cut -c1-16)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/guest-$key"
stamp="$cache/.built"
if [ -f "$stamp" ]; then echo "$cache"; exit 0; fi
# One build per cache at a time (the main checkout and worktrees share ~/.cache): a second build waits, then
# finds the image built.
mkdir -p "$(dirname "$cache")"
exec {lock_fd}>"$(dirname "$cache")/.guest-image.lock"
if ! flock --nonblock "$lock_fd"; then
  echo "waiting for another guest image build using $(dirname "$cache")" >&2
  flock "$lock_fd"
fi
if [ -f "$stamp" ]; then echo "$cache"; exit 0; fi
for tool in mmdebstrap sfdisk mkfs.vfat mcopy syslinux mkfs.ext4 qemu-img; do
  command -v "$tool" >/dev/null || { echo "error: $tool missing; run tools/guest/ensure-deps.sh" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "error: building the guest image needs root (mmdebstrap --mode=root)" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}/uds-guest-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# The root tree (the slow, downloading part) is kept until the disk is assembled, so a failed assembly
# step does not pay for mmdebstrap again.
root_key="$( { sed -n '/^# rootfs-begin/,/^# rootfs-end/p' "$0"; echo "$suite $mirror ${packages[*]}"; } | sha256sum | cut -c1-16)"
root="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/guest-rootfs-$root_key"
echo "building the guest image ($suite, ${#packages[@]} packages) into $cache" >&2
# rootfs-begin
if [ ! -f "$root.done" ]; then
rm -rf "$root"
# The hooks run after the packages are in: keep the first boot of every copy unique (no machine-id, no sshd
# host keys), let cloud-init look only at NoCloud, and make a small initramfs that carries what virtio needs.
mmdebstrap --mode=root --variant=minbase --quiet \
  --include="$(IFS=,; echo "${packages[*]}")" \
  --essential-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" && printf "MODULES=list\nCOMPRESS=gzip\n" > "$1/etc/initramfs-tools/conf.d/uds-guest.conf"' \
  --customize-hook='printf "virtio_pci\nvirtio_blk\nvirtio_net\next4\n" >> "$1/etc/initramfs-tools/modules"' \
  --customize-hook='chroot "$1" update-initramfs -u -k all >/dev/null' \
  --customize-hook='printf "/dev/vda2 / ext4 errors=remount-ro 0 1\n" > "$1/etc/fstab"' \
  --customize-hook='chroot "$1" systemctl enable systemd-networkd.service systemd-resolved.service >/dev/null 2>&1' \
  --customize-hook='rm -f "$1"/etc/ssh/ssh_host_* && : > "$1/etc/machine-id" && rm -f "$1/var/lib/dbus/machine-id"' \
  --customize-hook='echo debian > "$1/etc/hostname" && rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  "$suite" "$root" "deb $mirror $suite main" "deb $mirror $suite-updates main" >&2
touch "$root.done"
fi
# rootfs-end
# Settings that do not need packages go in here (outside the rootfs key), each idempotent.
cfg="$root/etc/cloud/cloud.cfg.d"
# The minbase image carries no en_US locale, so cloud-init's default `locale` would fail; C.UTF-8 is in libc.
printf "locale: C.UTF-8\n" > "$cfg/91-uds-locale.cfg"
# Only the seeds KubeVirt writes (cloudInitNoCloud, cloudInitConfigDrive): no probing of network metadata
# services, and ds-identify (the systemd generator) does not search either: cloud-init is simply enabled.
printf "datasource_list: [ NoCloud, ConfigDrive, None ]\n" > "$cfg/90-uds-datasource.cfg"
printf "policy: enabled\n" > "$root/etc/cloud/ds-identify.cfg"
# Host keys made at first boot: ECDSA (FIPS 186) and Ed25519. cloud-init's default list adds RSA 3072, whose
# prime search is the longest step before sshd can start under emulation, and DSA, which OpenSSH 9.2 no
# longer offers. userData may set ssh_genkeytypes to bring RSA back.
printf "ssh_genkeytypes: [ ecdsa, ed25519 ]\n" > "$cfg/92-uds-ssh-keys.cfg"
# cloud-init's locale module rewrites /etc/default/locale (a subprocess) unless it already names the locale.
printf "LANG=C.UTF-8\n" > "$root/etc/default/locale"
# The disk boots with syslinux: no GRUB for grub-dpkg to look for.
printf "grub_dpkg:\n  enabled: false\n" > "$cfg/93-uds-no-grub.cfg"
# e2scrub_reap removes stale e2scrub snapshots of LVM volumes: the image has no LVM.
chroot "$root" systemctl disable e2scrub_reap.service >/dev/null 2>&1
# The node exporter is in the image for spec.monitoring, whose cloud-init enables it (with the guest report):
# off otherwise, so an unmonitored guest neither spends boot time on it nor listens on 9100. Its Recommends
# (prometheus-node-exporter-collectors' apt/smartmon timers) are not installed.
chroot "$root" systemctl disable prometheus-node-exporter.service >/dev/null 2>&1

kernel="$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)"
initrd="$(ls "$root"/boot/initrd.img-* | sort -V | tail -1)"
disk="$work/debian-12.raw"
mib=$((1024 * 1024))
boot_start=1 boot_mib=64 disk_mib=2048
root_start=$((boot_start + boot_mib))
truncate -s "${disk_mib}M" "$disk"
sfdisk --quiet "$disk" <<PARTS
label: dos
start=$((boot_start * 2048)), size=$((boot_mib * 2048)), type=c, bootable
start=$((root_start * 2048)), type=83
PARTS
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$disk" bs=440 count=1 conv=notrunc status=none
mkfs.vfat -F 16 --offset $((boot_start * 2048)) -h $((boot_start * 2048)) -n UDSBOOT "$disk" $((boot_mib * 1024)) >/dev/null
cat > "$work/syslinux.cfg" <<CFG
SERIAL 0 115200
DEFAULT debian
PROMPT 0
TIMEOUT 0
LABEL debian
  KERNEL /vmlinuz
  INITRD /initrd.img
  APPEND root=/dev/vda2 ro console=ttyS0,115200 net.ifnames=0
CFG
export MTOOLS_SKIP_CHECK=1
fat="$disk@@$((boot_start * mib))"
mcopy -i "$fat" "$kernel" ::/vmlinuz
mcopy -i "$fat" "$initrd" ::/initrd.img
mcopy -i "$fat" "$work/syslinux.cfg" ::/syslinux.cfg
syslinux --offset $((boot_start * mib)) --install "$disk"
mkfs.ext4 -q -F -L udsroot -d "$root" -E offset=$((root_start * mib)) "$disk" "$(( (disk_mib - root_start) * 1024 ))k"

mkdir -p "$cache.partial"
qemu-img convert -O qcow2 "$disk" "$cache.partial/debian-12.qcow2"
mv "$disk" "$cache.partial/debian-12.raw"
rm -rf "$cache" && mv "$cache.partial" "$cache"
touch "$stamp"
[ -n "${UDS_GUEST_KEEP_ROOTFS:-}" ] || rm -rf "$root" "$root.done"  # keep it to iterate on the assembly
echo "$cache"
