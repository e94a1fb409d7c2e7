"""VMs as platform citizens: the reconciler's one door to the checks and side effects that depend on the
cluster around the VM.

- :meth:`Platform.assess` before rendering (:mod:`platform_assess`, over :mod:`platform_facts`);
- :meth:`Platform.filter_children`: drops the root DataVolume while CDI would refuse its source (creating it
  would only produce a stuck import that must be deleted by hand after the allowlist is fixed);
- :meth:`Platform.mesh_children` and :meth:`Platform.sync_package`: ``network.mode: uds-package`` rules into
  the namespace's UDS Package (:mod:`udspackage_sync`);
- :meth:`Platform.forget` when the VM is gone: its Package rules leave with it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from uds_vm_operator.api import SpecError, UDSVirtualMachineSpec
from uds_vm_operator.child_names import root_dv_name
from uds_vm_operator.controller import platform_assess
from uds_vm_operator.controller.platform_assess import (
    PlatformAssessment,
    previous_conditions,
    transition_warnings,
)
from uds_vm_operator.controller.platform_facts import facts_ttl_from_env, platform_facts_cache
from uds_vm_operator.controller.udspackage_sync import (
    CONDITION_TYPE as PACKAGE_CONDITION,
)
from uds_vm_operator.controller.udspackage_sync import (
    PackageSync,
    package_condition,
)
from uds_vm_operator.render import ClusterFacts, Owner, vm_package_rules
from uds_vm_operator.render.udspackage import with_mesh_annotations
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.conditions import Condition
from uds_vm_operator.runtime.errors import ControllerError

log = logging.getLogger("uds_vm_operator.platform")


@dataclass
class PackageOutcome:
    """The uds-package step's contribution to status."""

    writes: int = 0
    conditions: tuple[tuple[str, Condition], ...] = ()
    events: tuple[tuple[str, str, str], ...] = ()
    in_place: bool = False


@dataclass
class Platform:
    """The reconciler's door to everything in this module (see the module docstring)."""

    api: kube.KubeApi
    vm_known: Callable[[str, str], bool] = lambda _ns, _name: False
    ttl_s: float = field(default_factory=facts_ttl_from_env)

    def __post_init__(self) -> None:
        self.facts = platform_facts_cache(self.api, self.ttl_s)
        self.packages = PackageSync(self.api, self.vm_known)

    async def render_facts(self, base: ClusterFacts) -> ClusterFacts:
        """The renderer's cluster facts, completed with what the platform knows (VM-state persistence)."""
        persistent = (await self.facts.get()).vm_state_storage_class is not None
        if persistent == base.persistent_vm_state:
            return base
        return dataclasses.replace(base, persistent_vm_state=persistent)

    async def assess(self, owner_body: Mapping[str, Any], spec: UDSVirtualMachineSpec) -> PlatformAssessment:
        """The platform conditions of one VM (see :func:`platform_assess.assess`)."""
        return platform_assess.assess(owner_body, spec, await self.facts.get(), ttl_s=self.ttl_s)

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
