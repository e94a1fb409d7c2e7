"""Cross-namespace references a VM makes, and the operator's own proof that they were granted (issue 32).

CDI authorises a clone against the identity that creates the DataVolume: the operator. Left alone, anyone who
may write a UDSVirtualMachine could have the operator copy a disk out of any namespace (the confused deputy).
Two locks close that door (ADR 0016):

- at admission, the chart's ValidatingAdmissionPolicy ``uds-vm-operator-references`` checks the *author* of
  the VM holds ``datavolumes/source`` create in the source namespace (and ``get`` on every Secret named);
- here, the operator does not trust that it saw admission (the policy may be missing, the VM older than it,
  or created by a pool on the author's behalf). It clones across namespaces only when the source namespace
  grants cloning to the VM's namespace: a SubjectAccessReview for the group
  ``system:serviceaccounts:<vm namespace>``, which is exactly what ``uds-vmctl golden-image rbac`` binds.
  Anything else is refused before any child exists (condition + Warning Event).

Pure parts (which references a spec makes, the refusal text) are separate from the one API call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uds_vm_operator.api import UDSVirtualMachineSpec
from uds_vm_operator.controller.status import Refusal
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.ttl_cache import TtlCache

SUBJECT_ACCESS_REVIEW = kube.register_kind(
    kube.Kind("authorization.k8s.io/v1", "SubjectAccessReview", "subjectaccessreviews", namespaced=False)
)
REFUSAL_REASON = "CrossNamespaceSourceNotGranted"
PROBE_USER_NAME = "uds-vm-operator-clone-probe"
"""The service-account name in the review: no real account, only its namespace group carries the grant."""
GRANT_TTL_S = 30.0


@dataclass(frozen=True)
class CloneReference:
    """One clone source outside the VM's namespace."""

    field: str
    """Where the spec names it, e.g. ``spec.source.dataSource``."""
    kind: str
    namespace: str
    name: str


def cross_namespace_clones(spec: UDSVirtualMachineSpec, vm_namespace: str) -> list[CloneReference]:
    """Every clone source of ``spec`` in a namespace other than ``vm_namespace`` (pure)."""
    found: list[CloneReference] = []
    source = spec.source
    for field, kind, ref in (
        ("spec.source.pvc", "PersistentVolumeClaim", source.pvc),
        ("spec.source.dataSource", "DataSource", source.data_source),
    ):
        if ref is not None and ref.namespace and ref.namespace != vm_namespace:
            found.append(CloneReference(field, kind, ref.namespace, ref.name))
    media = spec.windows.driver_media if spec.windows is not None else None
    if media is not None and media.data_source is not None:
        media_ref = media.data_source
        if media_ref.namespace and media_ref.namespace != vm_namespace:
            found.append(
                CloneReference(
                    "spec.windows.driverMedia.dataSource", "DataSource", media_ref.namespace, media_ref.name
                )
            )
    return found


def consumer_review(vm_namespace: str, source_namespace: str) -> dict[str, Any]:
    """The review: may the service accounts of ``vm_namespace`` clone from ``source_namespace``?"""
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "metadata": {},
        "spec": {
            "user": f"system:serviceaccount:{vm_namespace}:{PROBE_USER_NAME}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{vm_namespace}",
                "system:authenticated",
            ],
            "resourceAttributes": {
                "group": "cdi.kubevirt.io",
                "resource": "datavolumes",
                "subresource": "source",
                "verb": "create",
                "namespace": source_namespace,
            },
        },
    }


def clone_refusal(vm_namespace: str, denied: list[CloneReference]) -> Refusal:
    """Say which reference was refused and the grant that would admit it."""
    first = denied[0]
    return Refusal(
        REFUSAL_REASON,
        f"{first.field} clones {first.kind} {first.namespace}/{first.name} from another namespace, and "
        f"namespace {first.namespace} does not grant cloning to namespace {vm_namespace}. The operator "
        "never clones on a user's behalf what the namespace could not clone itself: an admin of "
        f"{first.namespace} grants it with `uds-vmctl golden-image rbac --image-namespace {first.namespace} "
        f"--consumer-namespace {vm_namespace}` (datavolumes/source create for the group "
        f"system:serviceaccounts:{vm_namespace}). Nothing was created.",
    )


class CloneGrants:
    """Answers "may namespace A clone from namespace B?" with one SubjectAccessReview per pair and TTL."""

    def __init__(self, api: kube.KubeApi, ttl_s: float = GRANT_TTL_S) -> None:
        self.api = api
        self.ttl_s = ttl_s
        self._caches: dict[tuple[str, str], TtlCache[bool]] = {}

    def _review(self, vm_namespace: str, source_namespace: str) -> Callable[[], Any]:
        async def fetch() -> bool:
            result = await self.api.create(consumer_review(vm_namespace, source_namespace))
            return bool((result.get("status") or {}).get("allowed"))

        return fetch

    async def granted(self, vm_namespace: str, source_namespace: str) -> bool:
        """True when RBAC in ``source_namespace`` lets the service accounts of ``vm_namespace`` clone."""
        key = (vm_namespace, source_namespace)
        cache = self._caches.get(key)
        if cache is None:
            cache = self._caches[key] = TtlCache(self._review(vm_namespace, source_namespace), self.ttl_s)
        return await cache.get()

    async def refusal(self, spec: UDSVirtualMachineSpec, vm_namespace: str) -> Refusal | None:
        """The refusal for the first cross-namespace clone source that is not granted, else None."""
        denied = [
            ref
            for ref in cross_namespace_clones(spec, vm_namespace)
            if not await self.granted(vm_namespace, ref.namespace)
        ]
        return clone_refusal(vm_namespace, denied) if denied else None
