"""Pure renderers: a UDSVirtualMachine spec in, every child manifest out (dicts, deterministic, no I/O).

``render_children`` is the one entry point the controller needs; the per-kind modules (``datavolume``,
``virtualmachine``, ``networkpolicy``, ``cloudinit``, ``sysprep``, ``secrets``, ``datadisks``, ``exposure``,
``udspackage``) are public for tests and for readers looking for where a given object is built.
"""

from __future__ import annotations

from typing import Any

from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.models import UDSVirtualMachineSpec, validate_vm_name
from uds_vm_operator.render.admission import virtual_machine_violations
from uds_vm_operator.render.cloudinit import render_cloudinit_secret
from uds_vm_operator.render.common import VM_LABEL, ClusterFacts, Owner
from uds_vm_operator.render.datadisks import render_data_disks
from uds_vm_operator.render.datavolume import (
    expected_pvc_size,
    render_drivers_datavolume,
    render_root_datavolume,
    render_system_datavolume,
)
from uds_vm_operator.render.exposure import render_exposure
from uds_vm_operator.render.guestmonitor import render_metrics_service
from uds_vm_operator.render.networkpolicy import render_network_policy
from uds_vm_operator.render.secrets import generate_admin_password, render_admin_secret
from uds_vm_operator.render.sysprep import render_sysprep_secret, sysprep_mode
from uds_vm_operator.render.udspackage import merge_package, remove_vm_from_package, vm_package_rules
from uds_vm_operator.render.virtualmachine import (
    firmware_choice,
    live_migration_refusal,
    render_virtual_machine,
)

__all__ = [
    "VM_LABEL",
    "ClusterFacts",
    "Owner",
    "expected_pvc_size",
    "generate_admin_password",
    "live_migration_refusal",
    "merge_package",
    "remove_vm_from_package",
    "render_children",
    "vm_package_rules",
]


def render_children(
    owner: Owner,
    spec: UDSVirtualMachineSpec,
    facts: ClusterFacts,
    *,
    run_strategy: str | None = None,
    windows_admin_password: str | None = None,
) -> list[dict[str, Any]]:
    """Every child of the VM in apply order: Secrets, NetworkPolicy, data-disk PVCs, DataVolumes,
    VirtualMachine, then Services/HTTPRoutes.

    Raises :class:`SpecError` when the spec cannot be honoured as a whole (e.g. ``liveMigration`` on RWO
    disks), before anything is rendered, so the controller creates nothing half-way.
    ``windows_admin_password`` is the password from ``adminPasswordSecretRef`` or a generated one; an owned
    ``<name>-admin`` Secret is rendered only in the generated case (no ``adminPasswordSecretRef``).
    """
    validate_vm_name(owner.name)
    refusal = live_migration_refusal(spec)
    if refusal is not None:
        raise SpecError(f"spec.liveMigration: {refusal}")

    children: list[dict[str, Any]] = []
    mode = sysprep_mode(spec)
    if spec.os == "windows":
        if not windows_admin_password:
            raise SpecError(
                "spec.windows: no Administrator password available; create the Secret named in "
                "adminPasswordSecretRef, or remove the reference so the operator generates one"
            )
        if spec.windows is None or spec.windows.admin_password_secret_ref is None:
            children.append(render_admin_secret(owner, windows_admin_password))
        firmware, _ = firmware_choice(spec)
        children.append(render_sysprep_secret(owner, spec, windows_admin_password, efi=firmware != "bios"))
    else:
        children.append(render_cloudinit_secret(owner, spec))

    if spec.network.mode == "networkpolicy":
        children.append(
            render_network_policy(
                owner,
                spec,
                operator_namespace=facts.operator_namespace,
                prometheus_namespace=facts.prometheus_namespace,
            )
        )
    children += render_data_disks(owner, spec)
    children.append(render_root_datavolume(owner, spec, facts))
    if mode == "iso":
        children.append(render_system_datavolume(owner, spec))
    drivers = render_drivers_datavolume(owner, spec)
    if drivers is not None:
        children.append(drivers)

    vm = render_virtual_machine(owner, spec, facts, run_strategy=run_strategy)
    problems = virtual_machine_violations(vm)
    if problems:  # a renderer bug, not a user error; still surfaced as a clear condition
        raise SpecError(f"rendered VirtualMachine would be rejected by KubeVirt: {'; '.join(problems)}")
    children.append(vm)

    exposure = render_exposure(owner, spec)
    if spec.network.mode == "uds-package":
        # UDS Core creates the ingress (VirtualService) from the Package's expose entries.
        exposure = [child for child in exposure if child["kind"] == "Service"]
    children += exposure
    if spec.monitoring.enabled:
        children.append(render_metrics_service(owner))
    return children
