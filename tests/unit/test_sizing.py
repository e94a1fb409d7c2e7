"""SPEC §4 sizing plus the filesystem reserve (ADR 0013): a pure function of the virtual size."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uds_vm_operator.sizing import (
    FILESYSTEM_RESERVE_MIB,
    MIB,
    MINIMUM_PVC_MIB,
    pvc_mib,
    pvc_size,
    virtual_mib,
)


@pytest.mark.parametrize(
    ("virtual_mib_in", "expected"),
    [
        # SPEC §4's 40 GiB value holds: from ~3.2 GiB up the 6 % term decides.
        (40960, "43418Mi"),
        # SPEC §4 gave 1086Mi and 11Mi: too small on real ext4/xfs (ADR 0013); reserve and floor decide.
        (1024, "1216Mi"),
        (10, "300Mi"),
        (3200, "3392Mi"),
        (3300, "3498Mi"),
        (1, "300Mi"),
        (0, "300Mi"),
    ],
)
def test_worked_values(virtual_mib_in: int, expected: str) -> None:
    assert pvc_size(virtual_mib_in * MIB) == expected


def test_partial_mib_rounds_up_before_overhead() -> None:
    assert virtual_mib(10 * MIB + 1) == 11
    assert pvc_size(1024 * MIB + 1) == "1217Mi"


def test_negative_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        pvc_mib(-1)
    with pytest.raises(ValueError, match="overhead"):
        pvc_mib(MIB, -5)


@given(st.integers(min_value=0, max_value=1 << 50), st.integers(min_value=0, max_value=100))
def test_pvc_always_has_headroom_and_matches_formula(virtual_bytes: int, overhead: int) -> None:
    v = -(-virtual_bytes // MIB)
    got = pvc_mib(virtual_bytes, overhead)
    assert got >= v + FILESYSTEM_RESERVE_MIB and got >= MINIMUM_PVC_MIB
    assert got * MIB > virtual_bytes
    # exact rational arithmetic: ceil(v * (100 + o) / 100)
    assert got == max(-(-(v * (100 + overhead)) // 100), v + FILESYSTEM_RESERVE_MIB, MINIMUM_PVC_MIB)
    assert got <= max(math.ceil(v * (1 + overhead / 100)) + 1, v + FILESYSTEM_RESERVE_MIB, MINIMUM_PVC_MIB)


@given(st.integers(min_value=0, max_value=1 << 45), st.integers(min_value=0, max_value=1 << 45))
def test_monotonic_in_virtual_size(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    assert pvc_mib(lo) <= pvc_mib(hi)
