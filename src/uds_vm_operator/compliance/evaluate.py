"""Judge every VM against every control, from a snapshot of live objects. Pure: no API calls here.

Lula evaluates a validation once over all objects; we evaluate it once per UDSVirtualMachine, with the
``udsvms`` input narrowed to that VM and namespaced objects narrowed to its namespace. The rego is written
so both readings agree: it iterates over ``input.udsvms``, and a VM fails on its own evidence only. Evidence
that lives on other VMs (CP-10: a verified restore of this VM's backup is another VM) is read from the VMs
listed under a second resource name, which is narrowed to the namespace like any other namespaced object.

The clock is input too: ``input.now_ns`` (``CLOCK_INPUT``), one instant for the whole run, is the only
"now" a policy reads (CP-9's backup age). ``lula validate`` supplies no such key, so a policy falls back to
the engine's ``time.now_ns()``; tests pass a fixed ``now`` to :func:`assess`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from uds_vm_operator.compliance.component import LinkedControl
from uds_vm_operator.compliance.rego import Verdict, evaluate
from uds_vm_operator.compliance.validation import CLOCK_INPUT, VM_RESOURCE, ResourceRule, Validation

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


def vm_input(validation: Validation, vm: dict[str, Any], snapshot: Snapshot, now: datetime) -> dict[str, Any]:
    """The rego input for one VM: the VM alone under ``udsvms``, other resources from its namespace, and
    the run's clock as ``now_ns`` (nanoseconds since the epoch, what rego's ``time.now_ns()`` returns)."""
    namespace = vm["metadata"]["namespace"]
    document: dict[str, Any] = {CLOCK_INPUT: _epoch_ns(now)}
    rule: ResourceRule
    for rule in validation.resources:
        if rule.name == VM_RESOURCE:
            document[rule.name] = [vm]
        else:
            document[rule.name] = _in_namespace(snapshot.get(rule.api_key, ()), namespace)
    return document


def _epoch_ns(moment: datetime) -> int:
    """Nanoseconds since the epoch, exactly (no float rounding), of an aware or UTC-naive datetime."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    delta = aware - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def assess(
    controls: Sequence[LinkedControl], snapshot: Snapshot, now: datetime | None = None
) -> list[Finding]:
    """Evaluate each validation once per VM and fold the observations into per-control findings.

    ``now`` (default: the current time) is the one instant every policy of this run judges ages against.
    """
    clock = now if now is not None else datetime.now(UTC)
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
                    verdict = evaluate(validation, vm_input(validation, vm, snapshot, clock))
                    cache[key] = Observation(validation, ref, verdict)
                observations.append(cache[key])
            findings.append(Finding(control.control_id, ref, tuple(observations)))
    return findings
