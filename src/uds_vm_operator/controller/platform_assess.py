"""The platform's verdict on one VM, pure: from the cluster facts and the VM to conditions and a blocker.

The KVM guard (:mod:`kvm_guard`), CDI's private-address protection (:mod:`ssrf`) and the live-migration choice
become extra status conditions, a Ready blocker, Warning Events on transitions, and whether the root
DataVolume must wait. A VM blocked by a fact is re-queued after the facts interval, so it recovers by itself
when a KVM node joins or the allowlist is fixed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from uds_vm_operator.api import UDSVirtualMachineSpec
from uds_vm_operator.controller import kvm_guard, ssrf
from uds_vm_operator.controller.platform_facts import PlatformFacts
from uds_vm_operator.render.datavolume import DEFAULT_ACCESS_MODES, root_access_modes
from uds_vm_operator.runtime.conditions import Condition, by_type

LIVE_MIGRATION_CONDITION = "LiveMigration"
RWX = "ReadWriteMany"
NO_REQUEUE_RUN_STRATEGIES = frozenset({"Halted"})


@dataclass(frozen=True)
class PlatformAssessment:
    """The platform's verdict on one VM, before anything is applied."""

    conditions: tuple[tuple[str, Condition], ...] = ()
    ready_blocker: tuple[str, str] | None = None
    """(reason, message) that keeps Ready False while it holds (NoKVM, blocked source)."""
    events: tuple[tuple[str, str, str], ...] = ()
    """(type, reason, note) for conditions that just turned False (one Event per transition)."""
    hold_root_datavolume: bool = False
    requeue_after_s: float | None = None


def previous_conditions(owner_body: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The VM's stored conditions by type (for transition Events)."""
    return by_type((owner_body.get("status") or {}).get("conditions"))


def transition_warnings(
    previous: Mapping[str, Mapping[str, Any]], conditions: Sequence[tuple[str, Condition]]
) -> tuple[tuple[str, str, str], ...]:
    """A Warning Event for each condition that is False now and was not False for the same reason before."""
    events = []
    for cond_type, given in conditions:
        cond = Condition(*given)
        before = previous.get(cond_type) or {}
        if cond.is_false and (before.get("status"), before.get("reason")) != ("False", cond.reason):
            events.append(("Warning", cond.reason, cond.message))
    return tuple(events)


def live_migration_condition(spec: UDSVirtualMachineSpec) -> Condition | None:
    """Why the VM got the eviction strategy it got (None when live migration is not requested).

    All disks RWX: ``LiveMigrate``. Otherwise, with ``allowLiveMigrateIfPossible``: ``LiveMigrateIfPossible``
    and this condition names the disks that prevent migration. Without it the renderer refuses the spec
    (Ready False, reason ``LiveMigrationNeedsRWX``), so no condition is added here.
    """
    if not spec.live_migration:
        return None
    disks = [("spec.disk", list(root_access_modes(spec)))]
    disks += [
        (f"spec.dataDisks[{disk.name}]", list(disk.access_modes or DEFAULT_ACCESS_MODES))
        for disk in spec.data_disks
    ]
    not_rwx = [where for where, modes in disks if RWX not in modes]
    if not not_rwx:
        return Condition("True", "LiveMigrate", "Every disk is ReadWriteMany: evictionStrategy LiveMigrate.")
    if spec.allow_live_migrate_if_possible:
        return Condition(
            "False",
            "LiveMigrateIfPossible",
            f"{', '.join(not_rwx)} not ReadWriteMany, so evictionStrategy is LiveMigrateIfPossible: on a "
            "node drain the VM restarts elsewhere instead of migrating. Use ReadWriteMany disks to migrate.",
        )
    return None


def assess(
    owner_body: Mapping[str, Any],
    spec: UDSVirtualMachineSpec,
    facts: PlatformFacts,
    *,
    ttl_s: float,
) -> PlatformAssessment:
    """Pure: the platform conditions of one VM from the cluster facts."""
    conditions: list[tuple[str, Condition]] = []
    blocker: tuple[str, str] | None = None
    hold = False
    requeue = False
    wants_to_run = spec.run_strategy not in NO_REQUEUE_RUN_STRATEGIES

    kvm = kvm_guard.kvm_condition(facts.kvm) if facts.kvm is not None else None
    if kvm is not None:
        conditions.append((kvm_guard.CONDITION_TYPE, kvm))
        requeue = kvm.is_false  # nothing watches nodes or KubeVirt CRs: poll until KVM shows up
        if kvm.reason == kvm_guard.NO_KVM_REASON and wants_to_run:
            blocker = (kvm.reason, kvm.message)

    raw_source = (owner_body.get("spec") or {}).get("source") or {}
    source = ssrf.source_url_of(raw_source)
    if source is not None:
        cond = ssrf.ssrf_condition(
            *source, crd_has_allowlist=facts.cdi_allowlist_field, allowlist=facts.cdi_allowlist
        )
        if cond is not None:
            conditions.append((ssrf.CONDITION_TYPE, cond))
            if cond.is_false:
                hold, requeue = True, True
                blocker = (
                    cond.reason,
                    cond.message,
                )  # the disk cannot even be imported: the more basic problem

    migration = live_migration_condition(spec)
    if migration is not None:
        conditions.append((LIVE_MIGRATION_CONDITION, migration))

    return PlatformAssessment(
        conditions=tuple(conditions),
        ready_blocker=blocker,
        events=transition_warnings(previous_conditions(owner_body), conditions),
        hold_root_datavolume=hold,
        requeue_after_s=ttl_s if requeue else None,
    )
