"""VMs as platform citizens: the checks and side effects that depend on the cluster around the VM.

One object, :class:`Platform`, gives the reconciler four call sites:

- :meth:`Platform.assess` before rendering: the KVM guard (:mod:`kvm_guard`), CDI's private-address
  protection (:mod:`ssrf`) and the live-migration choice become extra status conditions, a Ready blocker,
  Warning Events on transitions, and whether the root DataVolume must wait.
- :meth:`Platform.filter_children`: drops the root DataVolume while CDI would refuse its source (creating it
  would only produce a stuck import that must be deleted by hand after the allowlist is fixed).
- :meth:`Platform.sync_package` after the children: ``network.mode: uds-package`` rules into the namespace's
  UDS Package (:mod:`udspackage_sync`).
- :meth:`Platform.forget` when the VM is gone: its Package rules leave with it.

Cluster facts (nodes, KubeVirt CRs, the CDIConfig CRD and object) are read with one LIST/GET each at most
every ``UDS_VM_PLATFORM_FACTS_TTL_S`` seconds (default 60), not per reconcile. A VM blocked by a fact is
re-queued after that interval, so it recovers by itself when a KVM node joins or the allowlist is fixed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.api import SpecError, UDSVirtualMachineSpec
from uds_vm_operator.apiversions import CDI_API_VERSION, KUBEVIRT_API_VERSION
from uds_vm_operator.controller import kvm_guard, ssrf
from uds_vm_operator.controller.udspackage_sync import (
    CONDITION_TYPE as PACKAGE_CONDITION,
)
from uds_vm_operator.controller.udspackage_sync import (
    PackageSync,
    package_condition,
)
from uds_vm_operator.render import ClusterFacts, Owner, vm_package_rules
from uds_vm_operator.render.common import ROLE_LABEL, VM_LABEL, root_dv_name
from uds_vm_operator.render.datavolume import DEFAULT_ACCESS_MODES, root_access_modes
from uds_vm_operator.render.udspackage import with_mesh_annotations
from uds_vm_operator.render.verifier import VERIFIER_ROLE
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.conditions import Condition, by_type
from uds_vm_operator.runtime.errors import ControllerError, KubeApiError

log = logging.getLogger("uds_vm_operator.platform")

NODE = kube.NODE
KUBEVIRT = kube.register_kind(kube.Kind(KUBEVIRT_API_VERSION, "KubeVirt", "kubevirts"))
CDI_CONFIG = kube.register_kind(kube.Kind(CDI_API_VERSION, "CDIConfig", "cdiconfigs", namespaced=False))
TTL_ENV = "UDS_VM_PLATFORM_FACTS_TTL_S"
DEFAULT_TTL_S = 60.0
LIVE_MIGRATION_CONDITION = "LiveMigration"
RWX = "ReadWriteMany"
NO_REQUEUE_RUN_STRATEGIES = frozenset({"Halted"})
PRUNABLE_KINDS = (kube.SERVICE, kube.HTTP_ROUTE, kube.NETWORK_POLICY)
"""Children a spec change can make obsolete (an exposed port removed, a switch to uds-package mode)."""


@dataclass(frozen=True)
class PlatformFacts:
    """What the cluster around the VMs offers; ``kvm`` is None when the nodes could not be read."""

    kvm: kvm_guard.KvmVerdict | None = None
    cdi_allowlist_field: bool = False
    cdi_allowlist: tuple[str, ...] = ()
    vm_state_storage_class: str | None = None
    """KubeVirt's ``spec.configuration.vmStateStorageClass``: with it, EFI variables and TPM state persist."""


def vm_state_storage_class(kubevirts: Sequence[Mapping[str, Any]]) -> str | None:
    """The VM-state storage class a KubeVirt CR configures, if any.

    A persistent TPM (BitLocker, Windows 11) and persistent EFI variables need KubeVirt to keep VM state in a
    PVC of this class; without it, asking for persistence makes KubeVirt refuse the VM, so the renderer only
    asks when the cluster says it can.
    """
    for kubevirt in kubevirts:
        configured = ((kubevirt.get("spec") or {}).get("configuration") or {}).get("vmStateStorageClass")
        if configured:
            return str(configured)
    return None


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


@dataclass
class PackageOutcome:
    """The uds-package step's contribution to status."""

    writes: int = 0
    conditions: tuple[tuple[str, Condition], ...] = ()
    events: tuple[tuple[str, str, str], ...] = ()
    in_place: bool = False


def facts_ttl_from_env() -> float:
    """The facts cache interval; a bad value falls back to the default instead of crashing the operator."""
    try:
        value = float(os.environ.get(TTL_ENV, DEFAULT_TTL_S))
    except ValueError:
        return DEFAULT_TTL_S
    return value if value > 0 else DEFAULT_TTL_S


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


class FactsCache:
    """Platform facts, fetched at most once per ``ttl_s`` (one fetch even under concurrency)."""

    def __init__(
        self,
        api: kube.KubeApi,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.ttl_s = ttl_s
        self._clock = clock
        self._facts: PlatformFacts | None = None
        self._fetched_at = 0.0
        self._lock = asyncio.Lock()
        self._reported: set[str] = set()

    async def get(self) -> PlatformFacts:
        """Cached facts, refreshed when stale."""
        async with self._lock:
            now = self._clock()
            if self._facts is None or now - self._fetched_at >= self.ttl_s:
                self._facts = await self._fetch()
                self._fetched_at = now
            return self._facts

    async def _read(self, what: str, fetch: Callable[[], Any]) -> Any:
        """One read; a refusal (RBAC) or outage makes that fact unknown and is logged once, not raised."""
        try:
            return await fetch()
        except ControllerError as exc:
            if what not in self._reported:
                self._reported.add(what)
                log.warning("platform fact unavailable", extra={"fact": what, "error": str(exc)})
            return None

    async def _fetch(self) -> PlatformFacts:
        nodes = await self._read("nodes", lambda: self.api.list(NODE))
        kubevirts = await self._read("kubevirts", lambda: self.api.list(KUBEVIRT))
        crd = await self._read("cdiconfig-crd", lambda: self.api.get(kube.CRD, None, ssrf.CDI_CONFIG_CRD))
        config = await self._read("cdiconfig", lambda: self.api.get(CDI_CONFIG, None, ssrf.CDI_CONFIG_NAME))
        allowlist = ((config or {}).get("spec") or {}).get(ssrf.ALLOWLIST_FIELD) or []
        return PlatformFacts(
            kvm=kvm_guard.kvm_verdict(nodes, kubevirts or []) if nodes is not None else None,
            cdi_allowlist_field=ssrf.cdi_has_allowlist(crd),
            cdi_allowlist=tuple(str(entry) for entry in allowlist),
            vm_state_storage_class=vm_state_storage_class(kubevirts or []),
        )


@dataclass
class Platform:
    """The reconciler's door to everything in this module (see the module docstring)."""

    api: kube.KubeApi
    vm_known: Callable[[str, str], bool] = lambda _ns, _name: False
    ttl_s: float = field(default_factory=facts_ttl_from_env)

    def __post_init__(self) -> None:
        self.facts = FactsCache(self.api, self.ttl_s)
        self.packages = PackageSync(self.api, self.vm_known)
        self._prune_denied: set[str] = set()

    async def render_facts(self, base: ClusterFacts) -> ClusterFacts:
        """The renderer's cluster facts, completed with what the platform knows (VM-state persistence)."""
        persistent = (await self.facts.get()).vm_state_storage_class is not None
        if persistent == base.persistent_vm_state:
            return base
        return dataclasses.replace(base, persistent_vm_state=persistent)

    async def assess(self, owner_body: Mapping[str, Any], spec: UDSVirtualMachineSpec) -> PlatformAssessment:
        """The platform conditions of one VM (see :func:`assess`)."""
        return assess(owner_body, spec, await self.facts.get(), ttl_s=self.ttl_s)

    @staticmethod
    def filter_children(
        owner: Owner,
        assessment: PlatformAssessment,
        children: list[dict[str, Any]],
        root_dv_exists: bool,
    ) -> list[dict[str, Any]]:
        """Children minus the root DataVolume while its source is blocked (an existing one is left alone)."""
        if not assessment.hold_root_datavolume or root_dv_exists:
            return children
        name = root_dv_name(owner.name)
        return [c for c in children if not (c["kind"] == "DataVolume" and c["metadata"]["name"] == name)]

    async def mesh_children(
        self, owner: Owner, spec: UDSVirtualMachineSpec, children: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """uds-package mode in a sidecar-mesh namespace: the annotations UDS admits on virt-launcher and CDI
        worker pods (render.udspackage); any other mode or mesh: the children unchanged, no read."""
        if spec.network.mode != "uds-package":
            return children
        return with_mesh_annotations(children, await self.packages.mesh_mode(owner.namespace))

    async def sync_package(
        self, owner: Owner, spec: UDSVirtualMachineSpec, owner_body: Mapping[str, Any]
    ) -> PackageOutcome:
        """uds-package mode: merge this VM's rules; a VM that left the mode has its rules removed."""
        previous = previous_conditions(owner_body)
        writes = 0
        if spec.network.mode != "uds-package":
            if PACKAGE_CONDITION not in previous:
                return PackageOutcome()  # never was in the Package: no read at all
            removed = await self.packages.sync(owner.namespace, owner.name, None)
            return PackageOutcome(writes=removed.writes)
        try:
            rules = vm_package_rules(owner.name, spec)
        except SpecError as exc:  # e.g. a namespace *selected* by expression: the Package names namespaces
            cond = Condition("False", "InvalidPackageRules", exc.message)
        else:
            result = await self.packages.sync(owner.namespace, owner.name, rules)
            cond = package_condition(result, owner.namespace, sum(len(v) for v in rules.values()))
            writes = result.writes
        conditions = ((PACKAGE_CONDITION, cond),)
        return PackageOutcome(
            writes=writes,
            conditions=conditions,
            events=transition_warnings(previous, conditions),
            in_place=cond.is_true,
        )

    async def prune_stale(
        self, owner: Owner, owner_body: Mapping[str, Any], children: Sequence[Mapping[str, Any]]
    ) -> int:
        """Delete our Services, HTTPRoutes and NetworkPolicy the spec no longer asks for.

        A removed ``expose[]`` entry must close the port, not leave a route behind. Only runs when the spec
        changed since the last status (``observedGeneration``), so a resync costs nothing; only objects
        carrying this VM's ownerReference are touched, each deleted with a UID precondition.
        """
        meta = owner_body.get("metadata") or {}
        if (owner_body.get("status") or {}).get("observedGeneration") == meta.get("generation"):
            return 0
        desired = {(str(c.get("kind")), str((c.get("metadata") or {}).get("name"))) for c in children}
        selector = ",".join(f"{k}={v}" for k, v in {VM_LABEL: owner.name, **MANAGED_BY_LABEL}.items())
        # The SI-7 verifier's deny-all NetworkPolicy is not a rendered child: verification_io owns it, and
        # pruning it would leave a running verifier pod unfenced.
        selector += f",{ROLE_LABEL}!={VERIFIER_ROLE}"
        writes = 0
        for kind in PRUNABLE_KINDS:
            try:
                writes += await self._prune_kind(kind, owner, selector, desired)
            except KubeApiError as exc:
                if exc.code != 403:
                    raise
                # RBAC without list/delete on this kind: say so once, do not fail every spec change.
                if kind.plural not in self._prune_denied:
                    self._prune_denied.add(kind.plural)
                    log.warning("cannot prune stale children", extra={"kind": kind.plural, "error": str(exc)})
        return writes

    async def _prune_kind(
        self, kind: kube.Kind, owner: Owner, selector: str, desired: set[tuple[str, str]]
    ) -> int:
        writes = 0
        for obj in await self.api.list(kind, owner.namespace, label_selector=selector):
            obj_meta = obj.get("metadata") or {}
            ours = any(ref.get("uid") == owner.uid for ref in obj_meta.get("ownerReferences") or [])
            if not ours or (kind.kind, str(obj_meta.get("name"))) in desired:
                continue
            await self.api.delete(kind, owner.namespace, str(obj_meta["name"]), uid=obj_meta.get("uid"))
            log.info("pruned", extra={"vm": f"{owner.namespace}/{owner.name}", "child": obj_meta["name"]})
            writes += 1
        return writes

    async def forget(self, namespace: str, name: str) -> int:
        """The VM is gone: remove its Package rules (one LIST when no Package exists; nothing else).

        Best effort: a failure is logged, not retried for an object that no longer exists; the next sync of
        any uds-package VM in the namespace prunes the leftover rules (see :mod:`udspackage_sync`).
        """
        try:
            return (await self.packages.sync(namespace, name, None)).writes
        except ControllerError as exc:
            log.warning("Package rules not removed", extra={"vm": f"{namespace}/{name}", "error": str(exc)})
            return 0
