"""SPEC §4: the PVC size is a pure function of the virtual size, with worked values pinned."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uds_vm_operator.sizing import MIB, pvc_mib, pvc_size, virtual_mib


@pytest.mark.parametrize(
    ("virtual_mib_in", "expected"),
    [(10, "11Mi"), (1024, "1086Mi"), (40960, "43418Mi"), (1, "2Mi"), (0, "1Mi")],
)
def test_worked_values_from_the_spec(virtual_mib_in: int, expected: str) -> None:
    assert pvc_size(virtual_mib_in * MIB) == expected


def test_partial_mib_rounds_up_before_overhead() -> None:
    assert virtual_mib(10 * MIB + 1) == 11
    assert pvc_size(10 * MIB + 1) == "12Mi"


def test_negative_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        pvc_mib(-1)
    with pytest.raises(ValueError, match="overhead"):
        pvc_mib(MIB, -5)


@given(st.integers(min_value=0, max_value=1 << 50), st.integers(min_value=0, max_value=100))
def test_pvc_always_has_headroom_and_matches_formula(virtual_bytes: int, overhead: int) -> None:
    v = -(-virtual_bytes // MIB)
    got = pvc_mib(virtual_bytes, overhead)
    assert got >= v + 1
    assert got * MIB > virtual_bytes
    # exact rational arithmetic: ceil(v * (100 + o) / 100)
    assert got == max(-(-(v * (100 + overhead)) // 100), v + 1)
    assert got <= math.ceil(v * (1 + overhead / 100)) + 1


@given(st.integers(min_value=0, max_value=1 << 45), st.integers(min_value=0, max_value=1 << 45))
def test_monotonic_in_virtual_size(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    assert pvc_mib(lo) <= pvc_mib(hi)
