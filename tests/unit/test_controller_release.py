"""controller/release.py: a deleting pool member's children are deleted by the operator, then it is let go.

An in-memory API stands in for the server here (what an object is, what a DELETE answers, a 404 for an
unserved kind); the integration tier runs the same path on a real API server and the pool bench measures it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.controller.release import (
    ChildRelease,
    belongs_to,
    holds_children,
    lingers,
    own_datavolume_names,
)
from uds_vm_operator.fleet import PoolRef, render_member
from uds_vm_operator.fleet.members import member_view
from uds_vm_operator.render.common import RELEASE_FINALIZER, VM_LABEL
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.errors import KubeApiError

VM_UID = "uid-member"
NS = "apps"
NAME = "web-0"


def labelled(name: str, *, owner_uid: str | None = VM_UID, vm: str = NAME, **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "labels": {VM_LABEL: vm, **MANAGED_BY_LABEL},
        **meta,
    }
    if owner_uid:
        metadata["ownerReferences"] = [{"kind": "UDSVirtualMachine", "name": vm, "uid": owner_uid}]
    return {"metadata": metadata}


class MemoryApi:
    """Objects per kind; a DELETE removes at once unless the object has finalizers (then it lingers)."""

    def __init__(
        self, objects: Mapping[kube.Kind, list[dict[str, Any]]], unserved: frozenset[str] = frozenset()
    ) -> None:
        self.objects = {kind: list(items) for kind, items in objects.items()}
        self.unserved = unserved
        self.deletes: list[tuple[str, str, str | None]] = []
        self.patches: list[dict[str, Any]] = []
        self.lists: list[str] = []

    async def list(self, kind: kube.Kind, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        self.lists.append(kind.plural)
        if kind.plural in self.unserved:
            raise KubeApiError(404, "NotFound", "not served", what=f"list {kind.plural}")
        wanted = dict(pair.split("=") for pair in label_selector.split(","))
        return [
            obj
            for obj in self.objects.get(kind, [])
            if wanted.items() <= ((obj["metadata"].get("labels") or {}).items())
        ]

    async def get(self, kind: kube.Kind, namespace: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self.objects.get(kind, []) if o["metadata"]["name"] == name), None)

    async def delete(
        self, kind: kube.Kind, namespace: str, name: str, *, uid: str | None = None
    ) -> dict[str, Any] | None:
        self.deletes.append((kind.plural, name, uid))
        obj = await self.get(kind, namespace, name)
        if obj is None:
            return None
        if uid and obj["metadata"]["uid"] != uid:
            raise KubeApiError(409, "Conflict", "uid precondition failed", what="delete")
        if obj["metadata"].get("finalizers"):
            obj["metadata"]["deletionTimestamp"] = "2026-12-03T12:00:00Z"
            return obj
        self.objects[kind].remove(obj)
        return {"kind": "Status", "status": "Success"}

    async def merge_patch(
        self, kind: kube.Kind, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        self.patches.append(dict(patch))
        obj = await self.get(kind, namespace, name)
        assert obj is not None
        assert patch["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
        obj["metadata"]["finalizers"] = patch["metadata"]["finalizers"]
        return obj


def member(**meta: Any) -> dict[str, Any]:
    body = labelled(NAME, owner_uid=None, resourceVersion="7", **meta)
    body["metadata"]["uid"] = VM_UID
    body["spec"] = {"os": "linux"}
    return body


def deleting_member() -> dict[str, Any]:
    return member(deletionTimestamp="2026-12-03T12:00:00Z", finalizers=[RELEASE_FINALIZER, "other/keep"])


def run(api: MemoryApi, body: dict[str, Any]) -> Any:
    return asyncio.run(ChildRelease(api).release(body))  # type: ignore[arg-type]


def test_a_member_is_born_with_the_finalizer_and_the_pool_sees_it() -> None:
    manifest = render_member(PoolRef("web", NS, "uid-pool"), {"spec": {}}, ordinal=0, revision="r1")
    assert manifest["metadata"]["finalizers"] == [RELEASE_FINALIZER]
    manifest["metadata"]["creationTimestamp"] = "2026-12-03T12:00:00Z"
    view = member_view("web", manifest)
    assert view is not None and view.releases_children
    del manifest["metadata"]["finalizers"]
    legacy = member_view("web", manifest)
    assert legacy is not None and not legacy.releases_children


def test_only_a_deleting_member_with_our_finalizer_holds_children() -> None:
    assert holds_children(deleting_member())
    assert not holds_children(member(finalizers=[RELEASE_FINALIZER]))
    assert not holds_children(member(deletionTimestamp="2026-12-03T12:00:00Z", finalizers=["other/keep"]))


def test_what_belongs_to_the_member() -> None:
    assert belongs_to(kube.SECRET, labelled("web-0-cloudinit"), NAME, VM_UID)
    assert not belongs_to(kube.SECRET, labelled("web-0-cloudinit", owner_uid="uid-older"), NAME, VM_UID)
    retained = labelled("web-0-data-db", owner_uid=None)
    assert not belongs_to(kube.PVC, retained, NAME, VM_UID), "a Retain disk has no owner and survives"
    cdi_pvc = labelled("web-0-dv", owner_uid=None)
    cdi_pvc["metadata"]["ownerReferences"] = [{"kind": "DataVolume", "name": "web-0-dv", "uid": "dv"}]
    assert belongs_to(kube.PVC, cdi_pvc, NAME, VM_UID)
    foreign_pvc = labelled("golden", owner_uid=None)
    foreign_pvc["metadata"]["ownerReferences"] = [{"kind": "DataVolume", "name": "golden", "uid": "dv"}]
    assert not belongs_to(kube.PVC, foreign_pvc, NAME, VM_UID)
    vmi = labelled(NAME, owner_uid=None)
    vmi["metadata"]["ownerReferences"] = [{"kind": "VirtualMachine", "name": NAME, "uid": "kv"}]
    assert belongs_to(kube.VIRTUAL_MACHINE_INSTANCE, vmi, NAME, VM_UID)
    assert own_datavolume_names(NAME, windows=False) == ("web-0-dv",)
    assert lingers({"metadata": {"deletionTimestamp": "x"}}) and not lingers(None)
    assert not lingers({"kind": "Status"})


def test_children_are_deleted_by_uid_and_the_finalizer_goes_when_none_is_left() -> None:
    api = MemoryApi(
        {
            kube.VIRTUAL_MACHINE: [labelled(NAME)],
            kube.DATA_VOLUME: [labelled("web-0-dv")],
            kube.SECRET: [
                labelled("web-0-cloudinit"),
                labelled("web-1-cloudinit", owner_uid="x", vm="web-1"),
            ],
            kube.NETWORK_POLICY: [labelled("web-0-netpol")],
            kube.PVC: [labelled("web-0-data-db", owner_uid=None)],
            kube.UDS_VM: [deleting_member()],
        },
        unserved=frozenset({kube.HTTP_ROUTE.plural}),
    )
    progress = run(api, deleting_member())
    assert progress.deleted == 4 and progress.lingering == 0 and progress.released
    deleted = sorted(name for _, name, _ in api.deletes)
    assert deleted == ["web-0", "web-0-cloudinit", "web-0-dv", "web-0-netpol"]
    assert all(uid == f"uid-{name}" for _, name, uid in api.deletes), "every deletion has a UID precondition"
    assert [o["metadata"]["name"] for o in api.objects[kube.SECRET]] == ["web-1-cloudinit"]
    assert [o["metadata"]["name"] for o in api.objects[kube.PVC]] == ["web-0-data-db"], "Retain disk kept"
    assert api.objects[kube.UDS_VM][0]["metadata"]["finalizers"] == ["other/keep"], "only ours removed"
    assert api.patches == [{"metadata": {"finalizers": ["other/keep"], "resourceVersion": "7"}}]
    again = ChildRelease(api)  # type: ignore[arg-type]
    asyncio.run(again.release(deleting_member()))
    asyncio.run(again.release(deleting_member()))
    assert api.lists.count(kube.HTTP_ROUTE.plural) == 2, "an unserved kind is asked about once per instance"


def test_a_lingering_child_holds_the_member_until_it_is_gone() -> None:
    kubevirt_vm = labelled(NAME, finalizers=["kubevirt.io/virtualMachineControllerFinalize"])
    cdi_pvc = labelled("web-0-dv", owner_uid=None, finalizers=["kubernetes.io/pvc-protection"])
    cdi_pvc["metadata"]["labels"] = {}  # CDI chose not to copy our labels: found by name
    cdi_pvc["metadata"]["ownerReferences"] = [{"kind": "DataVolume", "name": "web-0-dv", "uid": "dv"}]
    api = MemoryApi(
        {kube.VIRTUAL_MACHINE: [kubevirt_vm], kube.PVC: [cdi_pvc], kube.UDS_VM: [deleting_member()]}
    )
    first = run(api, deleting_member())
    assert first.deleted == 2 and first.lingering == 2 and not first.released
    assert api.patches == []
    second = run(api, deleting_member())
    assert second.deleted == 0 and second.lingering == 2, "a child already being deleted is not deleted again"
    api.objects[kube.VIRTUAL_MACHINE].clear()
    api.objects[kube.PVC].clear()
    assert run(api, deleting_member()).released


def test_a_member_replaced_meanwhile_is_not_touched() -> None:
    newer = member(finalizers=[RELEASE_FINALIZER])
    newer["metadata"]["uid"] = "uid-newer"
    api = MemoryApi({kube.UDS_VM: [newer]})
    progress = run(api, deleting_member())
    assert not progress.released and api.patches == []


def test_an_error_other_than_not_served_is_raised() -> None:
    class Forbidden(MemoryApi):
        async def list(self, kind: kube.Kind, namespace: str, label_selector: str) -> list[dict[str, Any]]:
            raise KubeApiError(403, "Forbidden", "no", what="list")

    with pytest.raises(KubeApiError):
        run(Forbidden({}), deleting_member())
