"""Judge every VM against every control, from a snapshot of live objects. Pure: no API calls here.

Lula evaluates a validation once over all objects; we evaluate it once per UDSVirtualMachine, with the
``udsvms`` input narrowed to that VM and namespaced objects narrowed to its namespace. The rego is written
so both readings agree: it iterates over ``input.udsvms``, and a VM fails on its own evidence only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from uds_vm_operator.compliance.component import LinkedControl
from uds_vm_operator.compliance.rego import Verdict, evaluate
from uds_vm_operator.compliance.validation import VM_RESOURCE, ResourceRule, Validation

ApiKey = tuple[str, str, str]
Snapshot = Mapping[ApiKey, Sequence[dict[str, Any]]]
"""Live objects per API resource (group, version, plural), as JSON dicts."""

VM_API: ApiKey = ("uds.dev", "v1alpha1", "udsvirtualmachines")


@dataclass(frozen=True)
class VmRef:
    """A UDSVirtualMachine by namespace and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Observation:
    """One validation run against one VM."""

    validation: Validation
    vm: VmRef
    verdict: Verdict


@dataclass(frozen=True)
class Finding:
    """One control for one VM: satisfied when every linked validation passed (Lula AND-s them)."""

    control_id: str
    vm: VmRef
    observations: tuple[Observation, ...]

    @property
    def satisfied(self) -> bool:
        """True when every observation behind this control passed."""
        return all(o.verdict.passed for o in self.observations)


def required_api_keys(controls: Sequence[LinkedControl]) -> set[ApiKey]:
    """Every API resource some validation reads, plus the VMs themselves."""
    keys = {VM_API}
    for control in controls:
        for validation in control.validations:
            keys.update(rule.api_key for rule in validation.resources)
    return keys


def _in_namespace(objects: Sequence[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """Objects of one namespace; cluster-scoped objects (no namespace) are kept for every VM."""
    kept = []
    for obj in objects:
        obj_ns = obj.get("metadata", {}).get("namespace")
        if obj_ns is None or obj_ns == namespace:
            kept.append(obj)
    return kept


def vm_input(validation: Validation, vm: dict[str, Any], snapshot: Snapshot) -> dict[str, Any]:
    """The rego input for one VM: the VM alone under ``udsvms``, other resources from its namespace."""
    namespace = vm["metadata"]["namespace"]
    document: dict[str, Any] = {}
    rule: ResourceRule
    for rule in validation.resources:
        if rule.name == VM_RESOURCE:
            document[rule.name] = [vm]
        else:
            document[rule.name] = _in_namespace(snapshot.get(rule.api_key, ()), namespace)
    return document


def assess(controls: Sequence[LinkedControl], snapshot: Snapshot) -> list[Finding]:
    """Evaluate each validation once per VM and fold the observations into per-control findings."""
    vms = sorted(snapshot.get(VM_API, ()), key=lambda v: (v["metadata"]["namespace"], v["metadata"]["name"]))
    cache: dict[tuple[str, VmRef], Observation] = {}
    findings = []
    for vm in vms:
        ref = VmRef(vm["metadata"]["namespace"], vm["metadata"]["name"])
        for control in controls:
            observations = []
            for validation in control.validations:
                key = (validation.uuid, ref)
                if key not in cache:
                    verdict = evaluate(validation, vm_input(validation, vm, snapshot))
                    cache[key] = Observation(validation, ref, verdict)
                observations.append(cache[key])
            findings.append(Finding(control.control_id, ref, tuple(observations)))
    return findings
