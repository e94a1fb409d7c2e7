#!/usr/bin/env bash
# The real node's system packages, all from Debian: containerd, runc and the CNI plugins (the runtime),
# iptables/ipset/conntrack (kube-proxy, kube-router), docker-registry (the loopback OCI registry), buildah
# (images without a Docker engine), busybox-static + libc6-dev (the node's own tiny images), xfsprogs (local
# PVs formatted as CSI drivers format them), util-linux (losetup), curl (probes).
set -euo pipefail
need=()
for pair in containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins iptables:iptables \
            ipset:ipset conntrack:conntrack docker-registry:docker-registry buildah:buildah \
            /bin/busybox:busybox-static /usr/lib/x86_64-linux-gnu/libc.a:libc6-dev mkfs.xfs:xfsprogs \
            losetup:mount curl:curl mmdebstrap:mmdebstrap nsenter:util-linux; do
  probe="${pair%%:*}" package="${pair#*:}"
  if [[ "$probe" == /* ]]; then [ -e "$probe" ] || need+=("$package"); else command -v "$probe" >/dev/null || need+=("$package"); fi
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "error: the real node needs ${need[*]}; install them with: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "installing ${need[*]} (Debian packages) for the real node" >&2
for attempt in 1 2 3; do
  if apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
    # The packages' own services never start here (no init system); the node runs its own containerd.
    exit 0
  fi
  echo "apt-get failed (attempt $attempt; another install may hold the lock); retrying" >&2
  sleep 10
done
exit 1
