"""Deleting a UDSVirtualMachine: owned children go with it (garbage collector), Retain disks stay and are
re-attached, with the same PVC, when a VM of the same name is created again."""

from __future__ import annotations

from typing import Any

from tests.integration.operator_fixtures import (
    api,
    core_path,
    dv_path,
    kv_path,
    netpol_path,
    operator,
    release_pvcs,
    udsvm,
    vm_path,
    wait_phase,
)
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api", "operator"]  # fixtures used by name

GC_TIMEOUT_S = 120


def test_delete_collects_owned_children_and_keeps_retained_disks_for_the_next_vm(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    data_disks = [
        {"name": "keep", "size": "1Gi", "retentionPolicy": "Retain"},
        {"name": "scratch", "size": "1Gi", "retentionPolicy": "Delete"},
    ]
    manifest = udsvm("db", namespace, dataDisks=data_disks)
    first = api.apply(manifest, vm_path(namespace, "db"))
    wait_phase(api, operator, namespace, "db", "Pending")
    keep = api.get(core_path(namespace, "persistentvolumeclaims", "db-data-keep"))
    scratch = api.get(core_path(namespace, "persistentvolumeclaims", "db-data-scratch"))
    assert keep is not None and scratch is not None
    assert not keep["metadata"].get("ownerReferences")
    assert keep["metadata"]["labels"]["uds.dev/retain"] == "true"
    assert [r["uid"] for r in scratch["metadata"]["ownerReferences"]] == [first["metadata"]["uid"]]
    vm = api.get(kv_path(namespace, "db"))
    assert vm is not None and "db-data-keep" in str(vm["spec"])

    api.delete(vm_path(namespace, "db"))
    owned = [
        dv_path(namespace, "db-dv"),
        kv_path(namespace, "db"),
        netpol_path(namespace, "db-netpol"),
        core_path(namespace, "secrets", "db-cloudinit"),
    ]
    scratch_path = core_path(namespace, "persistentvolumeclaims", "db-data-scratch")

    def all_collected() -> bool:
        # A PVC keeps the kubernetes.io/pvc-protection finalizer until the pvc-protection controller (not
        # part of this control plane) releases it: the garbage collector's delete shows as deletionTimestamp.
        pvc = api.get(scratch_path)
        pvc_deleted = pvc is None or bool(pvc["metadata"].get("deletionTimestamp"))
        return pvc_deleted and all(api.get(path) is None for path in owned)

    wait_for(all_collected, GC_TIMEOUT_S, 1.0, what="garbage collection of the owned children")
    survivor = api.get(core_path(namespace, "persistentvolumeclaims", "db-data-keep"))
    assert survivor is not None and survivor["metadata"]["uid"] == keep["metadata"]["uid"]
    assert 'vm="db"' not in operator.metrics()  # series of the deleted VM are gone

    second = api.apply(manifest, vm_path(namespace, "db"))
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    wait_phase(api, operator, namespace, "db", "Pending")
    reattached = api.get(core_path(namespace, "persistentvolumeclaims", "db-data-keep"))
    assert reattached is not None and reattached["metadata"]["uid"] == keep["metadata"]["uid"]
    new_vm: dict[str, Any] | None = api.get(kv_path(namespace, "db"))
    assert new_vm is not None and "db-data-keep" in str(new_vm["spec"])

    # Play the pvc-protection controller (not part of this control plane) so the namespace can be finalised;
    # the operator stops first, or it would re-create a released PVC (with a fresh finalizer) at once.
    operator.stop()
    release_pvcs(api, namespace)
