"""A populated size-less clone DataVolume made before `spec.storage.accessModes` was rendered is kept as
it is: CDI forbids adding the field, and replacing the DataVolume would destroy the disk. Anything else that
differs still goes to the immutable-spec settlement (reconciler._settle_datavolume)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from uds_vm_operator.controller.reconciler import populated_before_rendered_access_modes


def clone_dv(*, phase: str | None = "Succeeded", access_modes: list[str] | None = None) -> dict[str, Any]:
    storage: dict[str, Any] = {"volumeMode": "Filesystem", "storageClassName": "local"}
    if access_modes is not None:
        storage["accessModes"] = access_modes
    source = {"kind": "DataSource", "name": "golden", "namespace": "images"}
    dv: dict[str, Any] = {"spec": {"sourceRef": source, "storage": storage}}
    if phase is not None:
        dv["status"] = {"phase": phase}
    return dv


DESIRED = clone_dv(phase=None, access_modes=["ReadWriteOnce"])


def test_a_populated_clone_lacking_only_access_modes_is_kept() -> None:
    assert populated_before_rendered_access_modes(DESIRED, clone_dv())


@pytest.mark.parametrize("phase", [None, "Pending", "CloneInProgress", "Failed"])
def test_an_unpopulated_one_is_settled_as_before(phase: str | None) -> None:
    """Not populated: the settlement may replace it (which is what unsticks a clone CDI could not place)."""
    assert not populated_before_rendered_access_modes(DESIRED, clone_dv(phase=phase))


def test_access_modes_that_differ_are_not_tolerated() -> None:
    assert not populated_before_rendered_access_modes(DESIRED, clone_dv(access_modes=["ReadWriteMany"]))


def test_any_other_difference_is_not_tolerated() -> None:
    current = clone_dv()
    current["spec"]["storage"]["storageClassName"] = "other"
    assert not populated_before_rendered_access_modes(DESIRED, current)
    moved = clone_dv()
    moved["spec"]["sourceRef"]["name"] = "golden-v2"
    assert not populated_before_rendered_access_modes(DESIRED, moved)


def test_a_sized_disk_is_never_concerned() -> None:
    sized = {"spec": {"source": {"upload": {}}, "pvc": {"accessModes": ["ReadWriteOnce"]}}}
    current = copy.deepcopy(sized)
    current["spec"]["pvc"].pop("accessModes")
    current["status"] = {"phase": "Succeeded"}
    assert not populated_before_rendered_access_modes(sized, current)


def test_the_desired_manifest_is_not_changed() -> None:
    desired = copy.deepcopy(DESIRED)
    populated_before_rendered_access_modes(desired, clone_dv())
    assert desired == DESIRED
