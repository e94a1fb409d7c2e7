"""Deterministic PVC sizing (SPEC §4, with the filesystem reserve real volumes need; ADR 0013).

A PVC sized 1:1 with the virtual disk runs out of blocks on a filesystem volume, and in an air gap nobody
can resize storage on the fly. We ask for exactly

    max(ceil(virtual_mib * (1 + overhead)), virtual_mib + FILESYSTEM_RESERVE_MIB, MINIMUM_PVC_MIB) MiB

so the size is predictable, reviewable in Git and never inflated twice.

Why more than SPEC §4's ``max(ceil(v * 1.06), v + 1)``: CDI's importer refuses a Filesystem volume whose
*free* space (``statfs`` f_bavail) is below the virtual size, and a freshly made filesystem of P bytes has
much less than P free. Measured on loop devices formatted as CSI drivers do (``mkfs.ext4 -F -m0``,
``mkfs.xfs -f``; e2fsprogs 1.47, xfsprogs 6.1): ext4 loses 6.5 % of 1 GiB and 12 % of 256 MiB (journal,
inode tables), xfs 10 % of 1 GiB and 25 % of 320 MiB (its log is at least 64 MiB). A percentage alone cannot
cover a fixed journal or log on small disks, so a fixed reserve is added; from ~3 GiB up the 6 % term
dominates and SPEC §4's values hold unchanged (40960 MiB -> 43418Mi). mkfs.xfs refuses anything under
300 MiB, so no Filesystem PVC is smaller than that.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal

MIB = 1 << 20
DEFAULT_OVERHEAD_PERCENT = 6
FILESYSTEM_RESERVE_MIB = 192
"""Room for the filesystem's fixed metadata (ext4 journal, xfs log): every measured size up to 64 GiB kept
at least 49 MiB more free space than the virtual size on both ext4 and xfs with this reserve."""
MINIMUM_PVC_MIB = 300
"""The smallest volume mkfs.xfs formats ("must be larger than 300MB"); a smaller claim could never mount."""


def virtual_mib(virtual_bytes: int) -> int:
    """Round a virtual size up to whole MiB, because PVC sizes are requested in ``Mi``."""
    if virtual_bytes < 0:
        raise ValueError(f"virtual size must not be negative, got {virtual_bytes}")
    return -(-virtual_bytes // MIB)


def pvc_mib(virtual_bytes: int, overhead_percent: int | float | Decimal = DEFAULT_OVERHEAD_PERCENT) -> int:
    """Return the PVC size in MiB for a disk of ``virtual_bytes``.

    Decimal arithmetic keeps the result exact (``1024 * 1.06`` in binary floating point is not), so the
    same input always yields the same PVC, on every machine.
    """
    overhead = Decimal(str(overhead_percent))
    if overhead < 0:
        raise ValueError(f"overhead must not be negative, got {overhead_percent}%")
    v_mib = virtual_mib(virtual_bytes)
    inflated = (Decimal(v_mib) * (Decimal(1) + overhead / Decimal(100))).to_integral_value(ROUND_CEILING)
    return max(int(inflated), v_mib + FILESYSTEM_RESERVE_MIB, MINIMUM_PVC_MIB)


def pvc_size(virtual_bytes: int, overhead_percent: int | float | Decimal = DEFAULT_OVERHEAD_PERCENT) -> str:
    """Return the PVC size as a Kubernetes quantity string such as ``1216Mi``."""
    return f"{pvc_mib(virtual_bytes, overhead_percent)}Mi"
