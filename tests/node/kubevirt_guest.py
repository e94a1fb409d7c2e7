"""Guests that KubeVirt booted on the node, reached as a user would: OpenSSH from a pod's network namespace.

The guest is the project's Debian image (`make guest-image`, the guest tier's image) where the guest's
contents are the subject, or the tiny test guest (`make tiny-guest-image`: a kernel and an initramfs with
busybox, bash, dropbear and the QEMU guest agent) where KubeVirt's and the operator's mechanics are (policy
packets, power, pools); either is booted by virt-launcher under QEMU's software emulation from a PVC, with the
cloud-init NoCloud seed KubeVirt builds from the Secret the operator rendered. Its sshd listens on the
launcher pod's address (KubeVirt's masquerade binding forwards every port to the guest), so a connection from
a pod passes the VM's NetworkPolicy exactly as any client's would. `ssh` runs the host's OpenSSH client inside
that pod's network namespace (nsenter), never through a port-forward that would bypass the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.guest.guest_machine import built_image
from tools.node.guest_ssh import (
    BOOT_TIMEOUT_S,
    GUEST_USER,
    SshResult,
    guest_dns_lookup,
    guest_tcp,
    keypair,
    ssh,
    wait_for_login,
)

__all__ = [
    "BOOT_TIMEOUT_S",
    "GUEST_DISK",
    "GUEST_USER",
    "TINY_GUEST_DISK",
    "GuestKeys",
    "SshResult",
    "boot_id",
    "booted_cloud_init",
    "build_guest_image",
    "build_tiny_guest_image",
    "guest_dns_lookup",
    "guest_image_fixture",
    "guest_tcp",
    "keypair",
    "keys_fixture",
    "make_keys",
    "ssh",
    "tiny_guest_image_fixture",
    "wait_for_login",
]


@dataclass(frozen=True)
class GuestKeys:
    """Key pairs for the declared user and for a key nobody declared."""

    ops: Path
    ops_public: str
    stranger: Path


def build_guest_image() -> Path:
    """The raw Debian guest image, built (or reused from the cache) by tools/guest/image.sh."""
    return built_image("image.sh", "debian-12.raw")


GUEST_DISK = {"virtualSize": 2 * 1024**3, "storageClassName": "udsvm-local"}
"""The Debian guest image's virtual size (tools/guest/build-image.sh makes a 2 GiB raw disk)."""

TINY_DISK_BYTES = 48 * 1024**2
"""The tiny guest's raw disk (tools/guest/build-tiny-image.sh: one FAT partition with syslinux, the kernel and
the initramfs that is its whole system)."""
TINY_GUEST_DISK = {"virtualSize": TINY_DISK_BYTES, "storageClassName": "udsvm-local"}


def build_tiny_guest_image() -> Path:
    """The raw tiny test guest, built (or reused from the cache) by tools/guest/tiny-image.sh."""
    image = built_image("tiny-image.sh", "tiny.raw", timeout_s=1800)
    assert image.stat().st_size == TINY_DISK_BYTES, (
        f"{image}: not the {TINY_DISK_BYTES}-byte disk TINY_GUEST_DISK declares"
    )
    return image


def make_keys(directory: Path) -> GuestKeys:
    ops, ops_public = keypair(directory, "ops")
    stranger, _ = keypair(directory, "stranger")
    return GuestKeys(ops, ops_public, stranger)


def boot_id(pid: int, host: str, key: Path) -> str:
    """The guest kernel's boot id: a new value on every boot, read from inside the guest."""
    result = ssh(pid, host, GUEST_USER, key, "cat /proc/sys/kernel/random/boot_id")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def booted_cloud_init(keys: GuestKeys, **extra: Any) -> dict[str, Any]:
    """The UDSVirtualMachine's cloudInit for a booted guest: the declared sudo user `ops` with its key.

    Booted test guests keep the operator's default of one vCPU: with two, under TCG on the loaded CI machine,
    a pool's surge guest stalled in its kernel (RCU timer stall on cpu 1) and never booted (ADR 0017)."""
    return {
        "flavor": "debian",
        "users": [{"name": GUEST_USER, "sshAuthorizedKeys": [keys.ops_public], "sudo": True}],
        **extra,
    }


@pytest.fixture(scope="module", name="guest_image")
def guest_image_fixture() -> Path:
    """The Debian guest image, once per module (import ``guest_image_fixture``; use it as ``guest_image``)."""
    return build_guest_image()


@pytest.fixture(scope="module", name="tiny_guest_image")
def tiny_guest_image_fixture() -> Path:
    """The tiny test guest, once per module (import ``tiny_guest_image_fixture``; use it as
    ``tiny_guest_image``): for tests of mechanics, not of the guest's contents."""
    return build_tiny_guest_image()


@pytest.fixture(scope="module", name="keys")
def keys_fixture(tmp_path_factory: pytest.TempPathFactory) -> GuestKeys:
    """Key pairs for the declared user and a stranger, once per module (import ``keys_fixture``)."""
    return make_keys(tmp_path_factory.mktemp("keys"))
