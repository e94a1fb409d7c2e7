"""A DataVolume's spec is immutable once CDI has it, so what the operator does when its rendering of a disk
changes is a decision (reconciler._settle_datavolume), proven here on the real API server. CDI is played: its
status is written through the status subresource, and since CDI's webhook is absent, the test can shape a
DataVolume as an older operator made it. The real node covers the same clone with the real CDI
(tests/node/cdi/test_cdi_golden_clone.py).

- A populated size-less clone made before `spec.storage.accessModes` was rendered is kept as it is: no write,
  no refusal (adding the field would be refused by CDI, and replacing the disk would destroy it).
- Any other change to a populated disk is still refused with `DataVolumeSpecImmutable`, the disk untouched.
"""

from __future__ import annotations

from typing import Any

from tests.integration.operator_fixtures import api, dv_path, operator, play_cdi, status_of, udsvm, vm_path
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api", "operator"]  # fixtures used by name

IMMUTABLE = "DataVolumeSpecImmutable"


def reasons(api: Api, namespace: str, name: str) -> set[str]:
    return {str(c.get("reason")) for c in status_of(api, namespace, name).get("conditions") or []}


def disk_ready(api: Api, namespace: str, name: str) -> bool:
    conditions = status_of(api, namespace, name).get("conditions") or []
    return any(c.get("type") == "DiskReady" and c.get("status") == "True" for c in conditions)


def test_a_populated_clone_from_before_access_modes_is_kept_and_other_changes_are_refused(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    clone = {"dataSource": {"name": "golden", "namespace": namespace}}
    api.apply(udsvm("old", namespace, source=clone, disk={}), vm_path(namespace, "old"))
    path = dv_path(namespace, "old-dv")
    dv = wait_for(lambda: api.get(path), 60, 0.2, what="DataVolume old-dv")
    assert dv["spec"]["storage"]["accessModes"] == ["ReadWriteOnce"], "rendered for a size-less clone"
    play_cdi(api, namespace, "old-dv", "Succeeded", "100.0%")
    wait_for(lambda: disk_ready(api, namespace, "old") or None, 60, 0.2, what="DiskReady")

    # As an older operator made it (CDI's webhook would refuse this change; it is absent here).
    api.merge(path, {"spec": {"storage": {"accessModes": None}}})
    before = operator.reconciles()
    api.merge(vm_path(namespace, "old"), {"metadata": {"labels": {"touched": "1"}}})
    operator.wait_quiet(minimum=before + 1)
    kept: dict[str, Any] = api.get(path) or {}
    assert kept["metadata"]["uid"] == dv["metadata"]["uid"], "the populated disk is the same object"
    assert "accessModes" not in kept["spec"]["storage"], "never re-applied: CDI would refuse the change"
    assert IMMUTABLE not in reasons(api, namespace, "old"), status_of(api, namespace, "old")

    # A real change to the populated disk is still refused, and the disk is left as it is.
    api.merge(vm_path(namespace, "old"), {"spec": {"disk": {"storageClassName": "elsewhere"}}})
    wait_for(lambda: IMMUTABLE in reasons(api, namespace, "old") or None, 60, 0.2, what=IMMUTABLE)
    after: dict[str, Any] = api.get(path) or {}
    assert after["metadata"]["uid"] == dv["metadata"]["uid"], "the populated disk was not replaced"
    assert "storageClassName" not in after["spec"]["storage"], "nor changed"
    assert disk_ready(api, namespace, "old") is False, "the refusal is reported on the disk"
