"""Deterministic PVC sizing (SPEC §4).

A PVC sized 1:1 with the virtual disk runs out of blocks on a filesystem volume, and in an air gap nobody
can resize storage on the fly. We ask for exactly ``max(ceil(virtual_mib * (1 + overhead)), virtual_mib + 1)``
MiB, so the size is predictable, reviewable in Git and never inflated twice.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal

MIB = 1 << 20
DEFAULT_OVERHEAD_PERCENT = 6


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
    return max(int(inflated), v_mib + 1)


def pvc_size(virtual_bytes: int, overhead_percent: int | float | Decimal = DEFAULT_OVERHEAD_PERCENT) -> str:
    """Return the PVC size as a Kubernetes quantity string such as ``11Mi``."""
    return f"{pvc_mib(virtual_bytes, overhead_percent)}Mi"
