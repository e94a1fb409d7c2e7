#!/usr/bin/env bash
# Build (or reuse) the tiny test guest: a whole bootable disk (MBR + syslinux on one FAT partition) whose
# initramfs is the whole system: Debian's cloud kernel, busybox (init, DHCP, the shell tools), bash, dropbear
# (SSH) and Debian's qemu-guest-agent, every file taken from Debian packages. Its /init reads the NoCloud seed
# KubeVirt attaches (users, their SSH keys, the hostname) with a few lines of shell, and boots to an SSH login in
# seconds under software emulation. It is for the tests of KubeVirt's and the operator's mechanics (policy
# packets, power, pools and rolls, placement): it carries none of the Debian image's hardening, so no test of
# the guest's contents boots it (docs/guests.md).
# Cached in ~/.cache/uds-vm-operator/tiny-guest-<hash of this script, the init files and the pins>.
# Prints the cache directory on stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck disable=SC1091
source "$repo/versions.env"
suite="${GUEST_DEBIAN_SUITE:?GUEST_DEBIAN_SUITE missing from versions.env}"
mirror="${GUEST_DEBIAN_MIRROR:-$("$repo/tools/debian-archive.sh")}"
packages=(linux-image-cloud-amd64 busybox-static dropbear-bin qemu-guest-agent bash)
# The kernel modules the guest loads (with what they depend on): the virtio disk, NIC, serial ports (the
# guest agent's channel), entropy, the NoCloud ISO's file system and the ACPI power button (a stop is a
# clean power-off, not a kill after the grace period; evdev is how busybox acpid hears it).
modules=(virtio_pci virtio_blk virtio_net virtio_console virtio_rng isofs vfat button evdev)
# The programs copied from the Debian root, with the libraries ldd names for them.
programs=(/usr/bin/bash /usr/sbin/dropbear /usr/bin/dropbearkey /usr/sbin/qemu-ga)
key="$( { cat "$0" "$here"/tiny/*; echo "$suite $mirror ${packages[*]} ${modules[*]}"; } | sha256sum | cut -c1-16)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/uds-vm-operator/tiny-guest-$key"
stamp="$cache/.built"
if [ -f "$stamp" ]; then echo "$cache"; exit 0; fi
mkdir -p "$(dirname "$cache")"
exec {lock_fd}>"$(dirname "$cache")/.tiny-guest-image.lock"
if ! flock --nonblock "$lock_fd"; then
  echo "waiting for another tiny guest build using $(dirname "$cache")" >&2
  flock "$lock_fd"
fi
if [ -f "$stamp" ]; then echo "$cache"; exit 0; fi
for tool in mmdebstrap sfdisk mkfs.vfat mcopy syslinux cpio qemu-img; do
  command -v "$tool" >/dev/null || { echo "error: $tool missing; run tools/guest/ensure-deps.sh" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "error: building the tiny guest needs root (mmdebstrap --mode=root)" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}/uds-tiny-guest.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root" tree="$work/initramfs"
echo "building the tiny test guest ($suite: ${packages[*]}) into $cache" >&2
mmdebstrap --mode=root --variant=essential --quiet --include="$(IFS=,; echo "${packages[*]}")" \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  "$suite" "$root" "deb $mirror $suite main" "deb $mirror $suite-updates main" >&2

mkdir -p "$tree"/{bin,sbin,etc,proc,sys,dev,run,tmp,root,home,var/log,var/lib/cloud/instance,lib/modules}
chmod 1777 "$tree/tmp"
# busybox's applets as links; bash, dropbear and the agent are the Debian binaries with their libraries.
cp "$root/bin/busybox" "$tree/bin/busybox"
for applet in $(chroot "$root" /bin/busybox --list); do
  [ -e "$tree/bin/$applet" ] || ln -s busybox "$tree/bin/$applet"
done
copy_with_libraries() {
  local program="$1" library
  install -D "$root$program" "$tree$program"
  for library in $(chroot "$root" ldd "$program" | awk '/=> \// {print $3} /^\t\/lib/ {print $1}'); do
    [ -e "$tree$library" ] || install -D "$root$library" "$tree$library"
  done
}
for program in "${programs[@]}"; do copy_with_libraries "$program"; done
[ -e "$tree/lib64/ld-linux-x86-64.so.2" ] || { echo "error: ldd named no ELF loader for ${programs[*]}" >&2; exit 1; }
mkdir -p "$tree/usr/bin" "$tree/usr/sbin"
ln -sf /usr/bin/bash "$tree/bin/bash"
# Only the kernel's own modules this guest loads, in dependency order, insmod'ed by /init.
kernel="$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)"
version="${kernel##*/vmlinuz-}"
moddir="$root/lib/modules/$version"
: > "$tree/etc/tiny-modules"
add_module() {
  local name="$1" path dep
  path="$(awk -F: -v want="$name" '{n=$1; sub(/.*\//, "", n); sub(/\.ko(\.[a-z]+)?$/, "", n); gsub(/-/, "_", n)} n == want {print $1; exit}' "$moddir/modules.dep")"
  if [ -z "$path" ]; then
    grep -Eq "/${name//_/[_-]}\.ko" "$moddir/modules.builtin" \
      || { echo "error: kernel $version has no module $name" >&2; exit 1; }
    return 0
  fi
  grep -qx "$path" "$tree/etc/tiny-modules" && return 0
  for dep in $(awk -F': ' -v p="$path" '$1 == p {print $2}' "$moddir/modules.dep"); do
    dep="${dep##*/}"; dep="${dep%%.ko*}"; add_module "${dep//-/_}"
  done
  install -D -m 0644 "$moddir/$path" "$tree/lib/modules/$path"
  echo "$path" >> "$tree/etc/tiny-modules"
}
for module in "${modules[@]}"; do add_module "$module"; done
# The system's own files: os-release (the guest agent reports it), init and its scripts.
# os-release is Debian's (the agent reports it to KubeVirt), with a variant that says which image this is.
{ cat "$root/etc/os-release"; printf 'VARIANT="uds-vm-operator tiny test guest"\nVARIANT_ID=uds-tiny\n'; } > "$tree/etc/os-release"
install -m 0755 "$here/tiny/init" "$tree/init"
install -m 0755 "$here/tiny/rc" "$tree/etc/rc.tiny"
install -m 0755 "$here/tiny/seed" "$tree/sbin/tiny-seed"
install -m 0755 "$here/tiny/dhcp" "$tree/etc/udhcpc.script"
install -m 0644 "$here/tiny/inittab" "$tree/etc/inittab"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$tree/etc/passwd"
printf 'root:*:1::::::\nnobody:*:1::::::\n' > "$tree/etc/shadow" && chmod 0600 "$tree/etc/shadow"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$tree/etc/group"
printf '/bin/sh\n/bin/bash\n/usr/bin/bash\n' > "$tree/etc/shells"
# qemu-ga's guest-shutdown runs /sbin/shutdown: busybox has poweroff/reboot, so a shim maps it.
printf '#!/bin/sh\ncase " $* " in *" -r "*) exec /bin/reboot ;; *) exec /bin/poweroff ;; esac\n' > "$tree/sbin/shutdown"
chmod 0755 "$tree/sbin/shutdown"
(cd "$tree" && find . | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0 | gzip -9 > "$work/initrd.img")

disk="$work/tiny.raw"
mib=$((1024 * 1024))
boot_start=1 disk_mib=48
truncate -s "${disk_mib}M" "$disk"
sfdisk --quiet "$disk" <<PARTS
label: dos
start=$((boot_start * 2048)), type=c, bootable
PARTS
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$disk" bs=440 count=1 conv=notrunc status=none
mkfs.vfat -F 16 --offset $((boot_start * 2048)) -h $((boot_start * 2048)) -n UDSTINY "$disk" $(( (disk_mib - boot_start) * 1024 )) >/dev/null
cat > "$work/syslinux.cfg" <<CFG
SERIAL 0 115200
DEFAULT tiny
PROMPT 0
TIMEOUT 0
LABEL tiny
  KERNEL /vmlinuz
  INITRD /initrd.img
  APPEND console=ttyS0,115200 net.ifnames=0 quiet
CFG
export MTOOLS_SKIP_CHECK=1
fat="$disk@@$((boot_start * mib))"
mcopy -i "$fat" "$kernel" ::/vmlinuz
mcopy -i "$fat" "$work/initrd.img" ::/initrd.img
mcopy -i "$fat" "$work/syslinux.cfg" ::/syslinux.cfg
syslinux --offset $((boot_start * mib)) --install "$disk"

mkdir -p "$cache.partial"
mv "$disk" "$cache.partial/tiny.raw"
qemu-img convert -O qcow2 "$cache.partial/tiny.raw" "$cache.partial/tiny.qcow2"
echo "$version" > "$cache.partial/kernel-version"
rm -rf "$cache" && mv "$cache.partial" "$cache"
touch "$stamp"
echo "$cache"
