"""kopf wiring: watches feed the object store and enqueue reconciles; nothing else happens in handlers.

Only ``kopf.on.event`` handlers are registered. They keep no progress or diff-base state, so kopf never
writes annotations, finalizers or status of its own onto our objects — a resync of unchanged objects
makes zero write requests. Level-triggered reconciling, retries and concurrency live in
:class:`~uds_vm_operator.controller.reconciler.Reconciler` instead of kopf's change-detection handlers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kopf

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.controller.reconciler import Reconciler
from uds_vm_operator.controller.verification_io import POD as VERIFIER_POD
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.store import ObjectStore

VM_LABEL = "uds.dev/vm"
MANAGED_BY_SELECTOR = ",".join(f"{key}={value}" for key, value in MANAGED_BY_LABEL.items())

CHILD_KINDS = (
    kube.DATA_VOLUME,
    kube.VIRTUAL_MACHINE,
    kube.VIRTUAL_MACHINE_INSTANCE,
    kube.SECRET,
    kube.PVC,
    kube.NETWORK_POLICY,
    VERIFIER_POD,
)
"""Kinds watched (server-side filtered to our label) so their changes re-trigger the owning VM."""
LIST_CHUNK_SIZE = 10
QUEUE_IDLE_TIMEOUT_S = 0.05
NAMESPACE_GLOB_CHARS = frozenset("*?[!")


VM_CONTROLLER_KINDS = (kube.UDS_VM, *CHILD_KINDS)
"""Every kind the VM controller's handlers watch."""


def watched_kinds() -> set[tuple[str, str]]:
    """The (apiVersion, kind) pairs the store is kept current for by watches."""
    return {(k.api_version, k.kind) for k in VM_CONTROLLER_KINDS}


def owner_name_of(child: Mapping[str, Any]) -> str | None:
    """Name of the UDSVirtualMachine a child belongs to: its label, else its controller reference."""
    meta = child.get("metadata") or {}
    name = (meta.get("labels") or {}).get(VM_LABEL)
    if name:
        return str(name)
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == kube.UDS_VM.kind and ref.get("controller"):
            return str(ref.get("name"))
    return None


def needs_cluster_scanning(namespaces: tuple[str, ...]) -> bool:
    """kopf must watch namespaces (and so scan the cluster) only to expand namespace globs."""
    return any(NAMESPACE_GLOB_CHARS & set(namespace) for namespace in namespaces)


def configure_settings(
    settings: kopf.OperatorSettings, *, max_workers: int, scan_cluster: bool = False
) -> None:
    """Settings that keep kopf quiet on the API: no posted log Events, server-side label filters.

    Cluster scanning (a watch on every CRD and namespace) is off unless namespace globs need it: the
    served kinds are checked by :mod:`.api_presence` at a fraction of the memory.
    """
    settings.posting.enabled = False
    settings.scanning.disabled = not scan_cluster
    settings.execution.max_workers = max_workers
    for kind in CHILD_KINDS:
        settings.watching.label_selectors[(kind.api_version, kind.plural)] = MANAGED_BY_SELECTOR
    settings.watching.server_timeout = 300
    # Memory at fleet scale: list in small pages (not 1,000 objects of a kind decoded at once on every start)
    # and let kopf's per-object event workers exit right after a burst (the store, not kopf, keeps the state):
    # a worker idling for kopf's default 5 s holds its task, queue and last event body.
    settings.watching.chunk_size = LIST_CHUNK_SIZE
    settings.queueing.idle_timeout = QUEUE_IDLE_TIMEOUT_S
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30


def register_vm_handlers(registry: kopf.OperatorRegistry, reconciler: Reconciler) -> None:
    """Add the VM controller's watch handlers (its VMs and their children) to ``registry``."""
    store = reconciler.store

    @kopf.on.event(kube.UDS_VM.api_version, kube.UDS_VM.plural, registry=registry)
    async def on_vm_event(event: Mapping[str, Any], **_: Any) -> None:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        if event.get("type") == "DELETED":
            store.discard(kube.UDS_VM, obj)
        elif not store.put(kube.UDS_VM, obj):
            return  # the echo of our own status write: the reconcile that wrote it already saw this state
        if event.get("type") is None:
            # From kopf's initial listing (a (re)start): its children may not be listed into the store yet.
            reconciler.verify_children(str(meta.get("namespace")), str(meta.get("name")))
        reconciler.enqueue(str(meta.get("namespace")), str(meta.get("name")))

    for kind in CHILD_KINDS:
        _register_child(registry, reconciler, store, kind)


def _register_child(
    registry: kopf.OperatorRegistry, reconciler: Reconciler, store: ObjectStore, kind: kube.Kind
) -> None:
    @kopf.on.event(kind.api_version, kind.plural, registry=registry, id=f"child-{kind.plural}")
    async def on_child_event(event: Mapping[str, Any], **_: Any) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "DELETED":
            store.discard(kind, obj)
        elif not store.put(kind, obj):
            return  # the echo of our own apply: nothing the owner's reconcile has not seen
        owner = owner_name_of(obj)
        if owner:
            reconciler.enqueue(str((obj.get("metadata") or {}).get("namespace")), owner)
