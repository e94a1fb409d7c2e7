"""The operator's PVC size, formatted as a real filesystem of exactly that size, leaves CDI enough room.

CDI's importer (pkg/importer/data-processor.go) takes min(statfs free space, the claim's request) as the space
it may use on a Filesystem volume and refuses an image whose virtual size is larger ("A larger PVC is
required"). So the property that matters is: free space of a fresh filesystem of `pvc_mib(v)` MiB >= v MiB.
This checks it across 1 MiB .. 64 GiB on ext4 and xfs (sparse loop devices, formatted as CSI drivers format
them), in seconds and without a cluster; the imports themselves are in test_worker_images.py and on the
real node (tests/node/cdi/test_cdi_sizing.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cdi_images.disk_images import MIB, real_volume
from uds_vm_operator.sizing import pvc_mib

# Around the journal/log size steps and where the 6 % term takes over from the fixed reserve (~3.2 GiB).
VIRTUAL_MIB = [1, 16, 100, 172, 300, 512, 1024, 2048, 2700, 3200, 3500, 8192, 65536]


def free_bytes(mount: Path) -> int:
    """What CDI's importer reads (statfs f_bavail x f_bsize): space an unprivileged writer may use."""
    stat = os.statvfs(mount)
    return stat.f_bavail * stat.f_frsize


@pytest.mark.parametrize("filesystem", ["ext4", "xfs"])
@pytest.mark.parametrize("virtual", VIRTUAL_MIB, ids=[f"{v}MiB" for v in VIRTUAL_MIB])
def test_the_pvc_size_leaves_the_whole_virtual_disk_free(
    tmp_path: Path, filesystem: str, virtual: int
) -> None:
    with real_volume(tmp_path, pvc_mib(virtual * MIB) * MIB, filesystem) as mount:
        free = free_bytes(mount)
    assert free >= virtual * MIB, (
        f"{pvc_mib(virtual * MIB)} MiB of {filesystem} leaves {free / MIB:.1f} MiB free"
    )


@pytest.mark.parametrize("filesystem", ["ext4", "xfs"])
def test_spec_4_without_the_reserve_would_not_hold_a_1_gib_disk(tmp_path: Path, filesystem: str) -> None:
    """Why sizing.py departs from SPEC §4's 1086Mi for 1 GiB (ADR 0013): that filesystem has < 1 GiB free."""
    with real_volume(tmp_path, 1086 * MIB, filesystem) as mount:
        free = free_bytes(mount)
    assert free < 1024 * MIB, f"1086 MiB of {filesystem} now leaves {free / MIB:.1f} MiB: revisit the reserve"
