"""A deleted pool member's children are deleted by the operator itself, then the member is let go.

Why not leave them to the garbage collector: kube-controller-manager's collector works through every
cascading deletion in the cluster at its client's rate limit (20 requests per second by default), so a
fleet-wide roll of 1,000 members waited about 46 s of every ~55 s wave on it (ADR 0010). A pool member carries
:data:`RELEASE_FINALIZER` from birth and is deleted in the background; while it is held by that finalizer,
the VM controller deletes each object that carries the member's ownerReference (and the PVCs CDI made for the
member's own DataVolumes), waits for those that linger (KubeVirt's VirtualMachine stopping its guest, a PVC
in use, a pod terminating, the VMI KubeVirt removes), and only then removes the finalizer. A returning ordinal
therefore never meets a half-deleted predecessor, as with ``Foreground`` propagation, without the wait.

``Retain`` data disks carry no ownerReference and are never touched. Every deletion has a UID precondition,
and only objects with our labels and this member's ownerReference are candidates, so the operator's identity
deletes nothing its user had not already handed to the collector.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.child_names import drivers_dv_name, root_dv_name, system_dv_name
from uds_vm_operator.render.common import RELEASE_FINALIZER, VM_LABEL
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.errors import KubeApiError

log = logging.getLogger("uds_vm_operator.release")

DELETED_KINDS: tuple[kube.Kind, ...] = (
    kube.VIRTUAL_MACHINE,
    kube.DATA_VOLUME,
    kube.PVC,
    kube.SECRET,
    kube.NETWORK_POLICY,
    kube.SERVICE,
    kube.HTTP_ROUTE,
    kube.POD,
)
"""Kinds a VM owns (its renderers' and the SI-7 verifier's); each owned one is deleted in the background."""
WAITED_KINDS: tuple[kube.Kind, ...] = (kube.VIRTUAL_MACHINE_INSTANCE,)
"""Kinds KubeVirt removes itself once our VirtualMachine is deleted; the member waits until they are gone."""
RECHECK_S = 2.0
"""A member whose children linger is looked at again after this long (their deletion events also wake it)."""


@dataclass(frozen=True)
class ReleaseProgress:
    """One pass over a deleting member: deletions requested, children still present, finalizer removed."""

    deleted: int = 0
    lingering: int = 0
    released: bool = False


def holds_children(body: Mapping[str, Any]) -> bool:
    """True for a member being deleted that still carries our finalizer: its children are ours to delete."""
    meta = body.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and RELEASE_FINALIZER in (meta.get("finalizers") or ())


def without_release(meta: Mapping[str, Any]) -> list[str] | None:
    """The member's finalizers once ours is removed; None when it does not carry ours (nothing to write).

    The one rule for letting a member go, used by the controller and by the tests' stand-ins for it."""
    finalizers = list(meta.get("finalizers") or ())
    if RELEASE_FINALIZER not in finalizers:
        return None
    return [f for f in finalizers if f != RELEASE_FINALIZER]


def belongs_to(kind: kube.Kind, obj: Mapping[str, Any], vm_name: str, vm_uid: str) -> bool:
    """Whether ``obj`` goes with the member: it names the member as owner, or is a disk/VMI of its children.

    A PVC is the member's when CDI made it for one of the member's own DataVolumes (the DataVolume may already
    be gone); a VMI when our VirtualMachine of the same name owns it. Nothing else is ever matched.
    """
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    if any(ref.get("uid") == vm_uid for ref in refs):
        return True
    if kind is kube.PVC:
        own = own_datavolume_names(vm_name)
        return any(ref.get("kind") == kube.DATA_VOLUME.kind and ref.get("name") in own for ref in refs)
    if kind is kube.VIRTUAL_MACHINE_INSTANCE:
        return any(
            ref.get("kind") == kube.VIRTUAL_MACHINE.kind and ref.get("name") == vm_name for ref in refs
        )
    return False


def own_datavolume_names(vm_name: str, *, windows: bool = True) -> tuple[str, ...]:
    """The DataVolumes a VM makes: its root disk, and for Windows the system and driver disks."""
    if windows:
        return (root_dv_name(vm_name), system_dv_name(vm_name), drivers_dv_name(vm_name))
    return (root_dv_name(vm_name),)


def lingers(answer: Mapping[str, Any] | None) -> bool:
    """The API server kept the object after the DELETE (finalizers, a pod's grace period): wait for it."""
    return bool(((answer or {}).get("metadata") or {}).get("deletionTimestamp"))


class ChildRelease:
    """Deletes a deleting member's children and removes :data:`RELEASE_FINALIZER` once none is left."""

    def __init__(self, api: kube.KubeApi) -> None:
        self.api = api
        self._unserved: set[str] = set()
        """Kinds this cluster does not serve (e.g. HTTPRoute without Gateway API): not listed again."""

    async def release(self, body: Mapping[str, Any]) -> ReleaseProgress:
        """One pass: delete what is still there, count what lingers, let the member go when nothing does."""
        meta = body.get("metadata") or {}
        namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta["uid"])
        selector = ",".join(f"{k}={v}" for k, v in {VM_LABEL: name, **MANAGED_BY_LABEL}.items())
        deleted = lingering = 0
        for kind in (*DELETED_KINDS, *WAITED_KINDS):
            for obj in await self._candidates(kind, namespace, selector, body):
                if not belongs_to(kind, obj, name, uid):
                    continue
                obj_meta = obj.get("metadata") or {}
                if kind in WAITED_KINDS or obj_meta.get("deletionTimestamp"):
                    lingering += 1
                    continue
                answer = await self._delete(kind, namespace, obj_meta)
                deleted += 1
                lingering += lingers(answer)
        if lingering:
            return ReleaseProgress(deleted=deleted, lingering=lingering)
        released = await self._remove_finalizer(namespace, name, uid)
        if released:
            log.info("member released", extra={"vm": f"{namespace}/{name}", "deleted": deleted})
        return ReleaseProgress(deleted=deleted, released=released)

    async def _candidates(
        self, kind: kube.Kind, namespace: str, selector: str, body: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """Our labelled objects of ``kind``; for PVCs also those CDI made for the member's DataVolumes, read
        by name because CDI decides which of the DataVolume's labels its PVC gets."""
        found = await self._list(kind, namespace, selector)
        if kind is not kube.PVC:
            return found
        listed = {(obj.get("metadata") or {}).get("name") for obj in found}
        meta = body.get("metadata") or {}
        windows = (body.get("spec") or {}).get("os") == "windows"
        for name in own_datavolume_names(str(meta.get("name")), windows=windows):
            if name not in listed and (pvc := await self.api.get(kube.PVC, namespace, name)) is not None:
                found.append(pvc)
        return found

    async def _list(self, kind: kube.Kind, namespace: str, selector: str) -> list[dict[str, Any]]:
        if kind.plural in self._unserved:
            return []
        try:
            return await self.api.list(kind, namespace, label_selector=selector)
        except KubeApiError as exc:
            if exc.code != 404:
                raise
            self._unserved.add(kind.plural)
            return []

    async def _delete(
        self, kind: kube.Kind, namespace: str, obj_meta: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        try:
            return await self.api.delete(kind, namespace, str(obj_meta["name"]), uid=obj_meta.get("uid"))
        except KubeApiError as exc:
            if exc.code != 409:  # 409: that name already belongs to a newer object, not ours to delete
                raise
            return None

    async def _remove_finalizer(self, namespace: str, name: str, uid: str) -> bool:
        """Drop our finalizer from the live member, only if it is still the same, unchanged incarnation."""
        live = await self.api.get(kube.UDS_VM, namespace, name)
        live_meta = (live or {}).get("metadata") or {}
        remaining = without_release(live_meta)
        if live is None or live_meta.get("uid") != uid or remaining is None:
            return False
        patch = {"metadata": {"finalizers": remaining, "resourceVersion": live_meta.get("resourceVersion")}}
        try:
            await self.api.merge_patch(kube.UDS_VM, namespace, name, patch)
        except KubeApiError as exc:
            if exc.code == 404:
                return False
            raise  # 409: changed since read; the work queue retries with the newer object
        return True
