"""KVM guard: a VM on a cluster without hardware virtualisation fails loudly, never silently emulated.

KubeVirt schedules a VM only onto nodes whose device plugin advertises ``devices.kubevirt.io/kvm``. Without
such a node the virt-launcher pod stays Pending forever and nobody is told why, unless the KubeVirt CR sets
``spec.configuration.developerConfiguration.useEmulation: true`` (slow software emulation; the platform
spec forbids falling back to it silently). The operator never sets that flag itself: it reports.

Rules (pure; the controller lists nodes and KubeVirt CRs):
- Only schedulable nodes count (``spec.unschedulable`` unset); a node counts as KVM-capable when its
  allocatable or capacity for ``devices.kubevirt.io/kvm`` is above zero.
- Zero schedulable nodes means *unknown*, not "no KVM": a bare control plane (tests, a cluster being
  built, or an operator whose RBAC cannot list nodes) has no nodes to judge, and flagging every VM there
  would be noise that other checks and tests would have to work around.
- Emulation enabled by an admin is recorded on every VM (condition False, reason ``SoftwareEmulation``, a
  Warning Event on the transition) whatever the nodes offer: with ``useEmulation`` KubeVirt requests no KVM
  device for any launcher pod, so every guest runs under software emulation even on KVM nodes. It does not
  block Ready, because it is an explicit, visible decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.quantity import parse_bytes
from uds_vm_operator.runtime.conditions import Condition

KVM_RESOURCE = "devices.kubevirt.io/kvm"
CONDITION_TYPE = "KVMAvailable"
NO_KVM_REASON = "NoKVM"
EMULATION_REASON = "SoftwareEmulation"


@dataclass(frozen=True)
class KvmVerdict:
    """What the cluster offers: schedulable nodes, how many have KVM, and who enabled emulation."""

    schedulable_nodes: int
    kvm_nodes: int
    emulation_by: str | None = None
    """``namespace/name`` of a KubeVirt CR with useEmulation: true, or None."""

    @property
    def known(self) -> bool:
        """False when there is nothing to judge (no schedulable nodes visible)."""
        return self.schedulable_nodes > 0

    @property
    def no_kvm(self) -> bool:
        """True only when nodes are known, none has KVM, and emulation is not enabled: the VM cannot run."""
        return self.known and self.kvm_nodes == 0 and self.emulation_by is None


def _positive(value: Any) -> bool:
    """A device count quantity (KubeVirt advertises ``1k``) above zero; zero or garbage is not."""
    try:
        return parse_bytes(value if isinstance(value, int) else str(value), field="kvm") > 0
    except SpecError:
        return False


def node_has_kvm(node: Mapping[str, Any]) -> bool:
    """True when the node's device plugin advertises at least one KVM device."""
    status = node.get("status") or {}
    return any(_positive((status.get(key) or {}).get(KVM_RESOURCE, 0)) for key in ("allocatable", "capacity"))


def node_schedulable(node: Mapping[str, Any]) -> bool:
    """A cordoned node (``spec.unschedulable: true``) takes no new VMs."""
    return not (node.get("spec") or {}).get("unschedulable", False)


def emulation_enabled_by(kubevirts: Iterable[Mapping[str, Any]]) -> str | None:
    """``namespace/name`` of the first KubeVirt CR that enables software emulation, else None."""
    for cr in kubevirts:
        developer = ((cr.get("spec") or {}).get("configuration") or {}).get("developerConfiguration") or {}
        if developer.get("useEmulation") is True:
            meta = cr.get("metadata") or {}
            return f"{meta.get('namespace')}/{meta.get('name')}"
    return None


def kvm_verdict(nodes: Iterable[Mapping[str, Any]], kubevirts: Iterable[Mapping[str, Any]]) -> KvmVerdict:
    """Summarise the cluster for the guard."""
    schedulable = [node for node in nodes if node_schedulable(node)]
    return KvmVerdict(
        schedulable_nodes=len(schedulable),
        kvm_nodes=sum(1 for node in schedulable if node_has_kvm(node)),
        emulation_by=emulation_enabled_by(kubevirts),
    )


def kvm_condition(verdict: KvmVerdict) -> Condition | None:
    """The ``KVMAvailable`` condition, or None when nothing is known (no emulation setting and zero
    schedulable nodes)."""
    if verdict.emulation_by is not None:
        nodes = (
            f"{verdict.kvm_nodes} of {verdict.schedulable_nodes} schedulable nodes advertise {KVM_RESOURCE}, "
            "but "
            if verdict.kvm_nodes
            else f"No schedulable node advertises {KVM_RESOURCE}; "
        )
        return Condition(
            "False",
            EMULATION_REASON,
            f"{nodes}KubeVirt CR {verdict.emulation_by} sets "
            "spec.configuration.developerConfiguration.useEmulation: true, so KubeVirt requests no "
            "KVM device and this VM runs in slow software emulation (QEMU TCG). "
            "Remove that setting on KVM-capable nodes.",
        )
    if not verdict.known:
        return None
    if verdict.kvm_nodes:
        return Condition(
            "True",
            "KVMNodesAvailable",
            f"{verdict.kvm_nodes} of {verdict.schedulable_nodes} schedulable nodes advertise {KVM_RESOURCE}.",
        )
    return Condition(
        "False",
        NO_KVM_REASON,
        f"None of the {verdict.schedulable_nodes} schedulable nodes advertises {KVM_RESOURCE}, so the VM "
        "cannot be scheduled. Enable virtualisation (VT-x/AMD-V) in the nodes' firmware and check that "
        "virt-handler runs on them; the operator never enables software emulation on its own.",
    )
