"""What every child manifest shares: the owner, the facts about the cluster, names, labels and metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.api.models import VM_API_VERSION, VM_KIND

VM_LABEL = "uds.dev/vm"
"""Carried by every child and by the virt-launcher pod, so NetworkPolicies and Services can select a VM."""
POOL_LABEL = "uds.dev/pool"
"""On a pool's members (and, through them, their launcher pods): the pool they belong to."""
RETAIN_LABEL = "uds.dev/retain"
ROLE_LABEL = "uds.dev/role"
RELEASE_FINALIZER = "uds.dev/release-children"
"""On a pool member from birth: the operator deletes the member's children itself before the member goes
(controller/release.py), so a fleet roll never waits on the garbage collector's rate limit (ADR 0010)."""


@dataclass(frozen=True)
class ClusterFacts:
    """What the controller learned about the installed KubeVirt/CDI (read from CRDs and CRs, never assumed).

    ``cdi_http_checksum``: the installed DataVolume CRD has ``spec.source.http.checksum`` (CDI >= v1.65).
    Unknown fields are pruned silently, so rendering the field on an older CDI would claim a check that
    never happens. ``persistent_vm_state``: KubeVirt has a VM-state storage class, so EFI variables and the
    TPM can persist across reboots. ``operator_namespace``: where the operator's own pods run (its
    ``POD_NAMESPACE``), the one peer besides Prometheus a monitored guest's exporter admits;
    ``prometheus_namespace``: where that Prometheus runs (chart value networkPolicy.monitoringNamespace).
    """

    cdi_http_checksum: bool = False
    persistent_vm_state: bool = False
    operator_namespace: str = "uds-vm-operator"
    prometheus_namespace: str = "monitoring"


@dataclass(frozen=True)
class Owner:
    """The UDSVirtualMachine that owns the children (its UID makes the ownerReference).

    ``pod_labels``: labels the VM's virt-launcher pod carries besides the operator's own, as (key, value)
    pairs. A pool member's labels (the pool's template labels, its pool, revision and ordinal) are fixed when
    the member is made, so a NetworkPolicy elsewhere can select "the web pool" without ever changing a running
    VM's template.
    """

    name: str
    namespace: str
    uid: str
    pod_labels: tuple[tuple[str, str], ...] = ()

    api_version: ClassVar[str] = VM_API_VERSION
    kind: ClassVar[str] = VM_KIND

    def reference(self) -> dict[str, Any]:
        """The controller ownerReference: children are garbage-collected with the VM and block deletion."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def child_labels(owner: Owner, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Labels every child carries: who manages it and which VM it belongs to."""
    labels = {**MANAGED_BY_LABEL, VM_LABEL: owner.name}
    if extra:
        labels.update(extra)
    return labels


def child_metadata(
    owner: Owner,
    name: str,
    *,
    owned: bool = True,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Metadata of a child: name, namespace, labels and (unless ``owned`` is False) the ownerReference."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": owner.namespace,
        "labels": child_labels(owner, labels),
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owned:
        metadata["ownerReferences"] = [owner.reference()]
    return metadata
