"""The KubeVirt VirtualMachine ``<name>`` (``kubevirt.io/v1``).

KubeVirt's admission webhook is not running on a bare API server, so its rules are honoured here and pinned by
unit tests: ``runStrategy`` always set and ``running`` never; secure boot only with SMM; every disk has a
matching volume and every volume a disk, with unique names; the sysprep volume is a CD-ROM; cloud-init user
data always through ``cloudInitNoCloud.secretRef`` (inline user data is capped at 2 KiB); instancetype
excludes explicit CPU and memory.
"""

from __future__ import annotations

import hashlib
from typing import Any

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.api.models import UDSVirtualMachineSpec
from uds_vm_operator.apiversions import KUBEVIRT_API_VERSION
from uds_vm_operator.child_names import (
    cloudinit_secret_name,
    data_disk_pvc_name,
    drivers_dv_name,
    root_dv_name,
    sysprep_secret_name,
    system_dv_name,
)
from uds_vm_operator.render.common import VM_LABEL, ClusterFacts, Owner, child_metadata
from uds_vm_operator.render.datavolume import DEFAULT_ACCESS_MODES, root_access_modes
from uds_vm_operator.render.sysprep import sysprep_mode

RUN_STRATEGIES = frozenset({"Always", "Halted", "Manual", "RerunOnFailure", "Once"})
RWX = "ReadWriteMany"
ROOT_DISK = "rootdisk"
INSTALLER_DISK = "installer"
CLOUDINIT_DISK = "cloudinit"
SYSPREP_DISK = "sysprep"
DRIVERS_DISK = "drivers"
POD_NETWORK = "default"

_DEFAULT_CPU = {"linux": 1, "windows": 2}
_DEFAULT_MEMORY = {"linux": "1Gi", "windows": "4Gi"}

# The Hyper-V enlightenments KubeVirt's own Windows preferences use; synictimer needs synic needs vpindex.
_HYPERV_FEATURES: dict[str, Any] = {
    "relaxed": {},
    "vapic": {},
    "spinlocks": {"spinlocks": 8191},
    "vpindex": {},
    "runtime": {},
    "synic": {},
    "synictimer": {"direct": {}},
    "frequencies": {},
    "tlbflush": {},
    "ipi": {},
    "reset": {},
}
_WINDOWS_CLOCK: dict[str, Any] = {
    "utc": {},
    "timer": {
        "hpet": {"present": False},
        "pit": {"tickPolicy": "delay"},
        "rtc": {"tickPolicy": "catchup"},
        "hyperv": {},
    },
}


def _all_disk_access_modes(spec: UDSVirtualMachineSpec) -> list[tuple[str, list[str]]]:
    """Every PVC-backed disk of the VM with its access modes (for the live-migration decision)."""
    disks = [("spec.disk", root_access_modes(spec))]
    disks += [
        (f"spec.dataDisks[{disk.name}]", list(disk.access_modes or DEFAULT_ACCESS_MODES))
        for disk in spec.data_disks
    ]
    return disks


def live_migration_refusal(spec: UDSVirtualMachineSpec) -> str | None:
    """Why ``liveMigration: true`` cannot be honoured, or None.

    ``evictionStrategy: LiveMigrate`` on a ReadWriteOnce disk makes the VMI ``LiveMigratable=False`` and
    blocks node drains, so we refuse it (unless the user accepts ``LiveMigrateIfPossible``). The controller
    turns the text into a condition and an Event, and creates nothing.
    """
    if not spec.live_migration or spec.allow_live_migrate_if_possible:
        return None
    not_rwx = [where for where, modes in _all_disk_access_modes(spec) if RWX not in modes]
    if not not_rwx:
        return None
    return (
        f"liveMigration needs ReadWriteMany disks but {', '.join(not_rwx)} "
        "is not ReadWriteMany; set accessModes: [ReadWriteMany] on a storage class that supports it, or set "
        "allowLiveMigrateIfPossible: true to migrate only when possible"
    )


def eviction_strategy(spec: UDSVirtualMachineSpec) -> str:
    """``LiveMigrate`` only with RWX everywhere; ``LiveMigrateIfPossible`` if allowed; otherwise ``None``."""
    if not spec.live_migration:
        return "None"
    refusal = live_migration_refusal(spec)
    if refusal is not None:
        raise SpecError(refusal)
    all_rwx = all(RWX in modes for _, modes in _all_disk_access_modes(spec))
    return "LiveMigrate" if all_rwx else "LiveMigrateIfPossible"


def firmware_choice(spec: UDSVirtualMachineSpec) -> tuple[str, bool]:
    """(firmware type, tpm): declared, or hardened defaults (Windows: EFI secure boot + TPM; Linux: BIOS)."""
    if spec.firmware is not None:
        return spec.firmware.type, spec.firmware.tpm
    if spec.os == "windows":
        return "efi-secureboot", True
    return "bios", False


def _firmware(spec: UDSVirtualMachineSpec, facts: ClusterFacts) -> tuple[dict[str, Any], bool]:
    """The ``domain.firmware`` block and whether SMM must be enabled."""
    kind, _ = firmware_choice(spec)
    if kind == "bios":
        return {"bootloader": {"bios": {}}}, False
    efi: dict[str, Any] = {"secureBoot": kind == "efi-secureboot"}
    if facts.persistent_vm_state:
        efi["persistent"] = True
    # KubeVirt: "SecureBoot requires SMM, which is currently disabled"; secureBoot defaults to true.
    return {"bootloader": {"efi": efi}}, kind == "efi-secureboot"


def _disk(name: str, bus: str, *, cdrom: bool = False, boot_order: int | None = None) -> dict[str, Any]:
    disk: dict[str, Any] = {"name": name, ("cdrom" if cdrom else "disk"): {"bus": bus}}
    if boot_order is not None:
        disk["bootOrder"] = boot_order
    return disk


def _disks_and_volumes(
    owner: Owner, spec: UDSVirtualMachineSpec
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Disks and their volumes, in a fixed order; each disk name equals its volume name."""
    disks: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    mode = sysprep_mode(spec)
    has_drivers = spec.windows is not None and spec.windows.driver_media is not None
    # Windows setup sees virtio disks only with drivers loaded; without driver media the system disk is SATA.
    root_bus = "sata" if mode == "iso" and not has_drivers else "virtio"

    if mode == "iso":
        disks.append(_disk(ROOT_DISK, root_bus, boot_order=1))
        volumes.append({"name": ROOT_DISK, "dataVolume": {"name": system_dv_name(owner.name)}})
        disks.append(_disk(INSTALLER_DISK, "sata", cdrom=True, boot_order=2))
        volumes.append({"name": INSTALLER_DISK, "dataVolume": {"name": root_dv_name(owner.name)}})
    else:
        disks.append(_disk(ROOT_DISK, root_bus, boot_order=1))
        volumes.append({"name": ROOT_DISK, "dataVolume": {"name": root_dv_name(owner.name)}})

    for data_disk in spec.data_disks:
        name = f"data-{data_disk.name}"
        disks.append(_disk(name, "virtio"))
        volumes.append(
            {
                "name": name,
                "persistentVolumeClaim": {"claimName": data_disk_pvc_name(owner.name, data_disk.name)},
            }
        )

    if spec.os == "linux":
        disks.append(_disk(CLOUDINIT_DISK, "virtio"))
        volumes.append(
            {
                "name": CLOUDINIT_DISK,
                "cloudInitNoCloud": {"secretRef": {"name": cloudinit_secret_name(owner.name)}},
            }
        )
    else:
        # KubeVirt attaches the sysprep volume as a CD-ROM; a `disk` entry would not be readable by Setup.
        disks.append(_disk(SYSPREP_DISK, "sata", cdrom=True))
        volumes.append(
            {"name": SYSPREP_DISK, "sysprep": {"secret": {"name": sysprep_secret_name(owner.name)}}}
        )
        if spec.windows is not None and spec.windows.driver_media is not None:
            disks.append(_disk(DRIVERS_DISK, "sata", cdrom=True))
            media = spec.windows.driver_media
            if media.pvc is not None:
                volumes.append(
                    {
                        "name": DRIVERS_DISK,
                        "persistentVolumeClaim": {"claimName": media.pvc, "readOnly": True},
                    }
                )
            else:
                volumes.append({"name": DRIVERS_DISK, "dataVolume": {"name": drivers_dv_name(owner.name)}})
    return disks, volumes


GUEST_AGENT_READINESS: dict[str, Any] = {
    "guestAgentPing": {},
    "initialDelaySeconds": 5,
    "periodSeconds": 5,
    "timeoutSeconds": 5,
    "failureThreshold": 3,
}
"""KubeVirt's readiness probe that pings the guest's QEMU agent (through virt-probe in the launcher pod):
the VMI, and so the VirtualMachine's ``status.ready``, turns Ready only when the guest answers, i.e. it
booted to userspace. A guest whose boot is broken never becomes Ready, and a pool roll waits for it."""


def stable_mac_address(owner: Owner) -> str:
    """The guest NIC's MAC address, the same on every start of this VM.

    KubeVirt gives each new VMI a random MAC unless the VM names one, and a guest's network configuration is
    commonly bound to its NIC's MAC (cloud-init renders ``[Match] MACAddress=`` on the first boot): after a
    restart such a guest finds no configured NIC and has no network at all (measured on the real KubeVirt:
    the Debian guest's eth0 ``unmanaged`` after ``uds-vmctl power restart``). The address is derived from the
    VM's namespace and name, locally administered and unicast; it only exists on the launcher pod's own
    bridge (masquerade), so it never meets another VM's on a shared segment.
    """
    digest = bytearray(hashlib.sha256(f"{owner.namespace}/{owner.name}".encode()).digest()[:6])
    digest[0] = (digest[0] & 0xFC) | 0x02
    return ":".join(f"{octet:02x}" for octet in digest)


def _devices(
    owner: Owner, spec: UDSVirtualMachineSpec, facts: ClusterFacts, disks: list[dict[str, Any]]
) -> dict[str, Any]:
    """No graphics, one masquerade NIC with a stable MAC, the disks, and a vTPM when the firmware has one."""
    _, tpm = firmware_choice(spec)
    devices: dict[str, Any] = {
        "autoattachGraphicsDevice": False,
        "disks": disks,
        "interfaces": [{"name": POD_NETWORK, "masquerade": {}, "macAddress": stable_mac_address(owner)}],
    }
    if tpm:
        devices["tpm"] = {"persistent": True} if facts.persistent_vm_state else {}
    return devices


def _domain(
    owner: Owner, spec: UDSVirtualMachineSpec, facts: ClusterFacts, disks: list[dict[str, Any]]
) -> dict[str, Any]:
    """The domain minus CPU and memory: devices, firmware, SMM for secure boot, Windows' clock and Hyper-V."""
    firmware, needs_smm = _firmware(spec, facts)
    domain: dict[str, Any] = {"devices": _devices(owner, spec, facts, disks), "firmware": firmware}
    features: dict[str, Any] = {}
    if needs_smm:
        features["smm"] = {"enabled": True}
    if spec.os == "windows":
        features.update({"acpi": {}, "apic": {}, "hyperv": dict(_HYPERV_FEATURES)})
        domain["clock"] = dict(_WINDOWS_CLOCK)
    if features:
        domain["features"] = features
    return domain


def _sizing(spec: UDSVirtualMachineSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """(VM spec keys, domain keys): an instancetype (KubeVirt refuses explicit CPU and memory with one), or
    cores and guest memory, declared or the OS default; a preference in either case."""
    references: dict[str, Any] = {}
    sizing: dict[str, Any] = {}
    resources = spec.resources
    if resources is not None and resources.instancetype is not None:
        references["instancetype"] = {"name": resources.instancetype}
    else:
        cpu = resources.cpu if resources is not None and resources.cpu is not None else _DEFAULT_CPU[spec.os]
        memory = (
            resources.memory
            if resources is not None and resources.memory is not None
            else _DEFAULT_MEMORY[spec.os]
        )
        sizing["cpu"] = {"cores": cpu}
        sizing["memory"] = {"guest": memory}
    if resources is not None and resources.preference is not None:
        references["preference"] = {"name": resources.preference}
    return references, sizing


def _template_spec(
    spec: UDSVirtualMachineSpec, domain: dict[str, Any], volumes: list[dict[str, Any]]
) -> dict[str, Any]:
    template_spec: dict[str, Any] = {
        "domain": domain,
        "evictionStrategy": eviction_strategy(spec),
        "networks": [{"name": POD_NETWORK, "pod": {}}],
        "volumes": volumes,
    }
    if spec.effective_readiness == "guestAgent":
        template_spec["readinessProbe"] = dict(GUEST_AGENT_READINESS)
    return template_spec


def render_virtual_machine(
    owner: Owner, spec: UDSVirtualMachineSpec, facts: ClusterFacts, *, run_strategy: str | None = None
) -> dict[str, Any]:
    """The KubeVirt VirtualMachine ``<name>``; ``run_strategy`` overrides ``spec.runStrategy`` (e.g. Halted
    while the disk digest is not yet verified)."""
    strategy = run_strategy or spec.run_strategy
    if strategy not in RUN_STRATEGIES:
        raise SpecError(f"runStrategy {strategy!r} is not one of {', '.join(sorted(RUN_STRATEGIES))}")
    disks, volumes = _disks_and_volumes(owner, spec)
    domain = _domain(owner, spec, facts, disks)
    references, sizing = _sizing(spec)
    domain.update(sizing)
    vm_spec: dict[str, Any] = {"runStrategy": strategy, **references}
    vm_spec["template"] = {
        "metadata": {"labels": {**dict(owner.pod_labels), **MANAGED_BY_LABEL, VM_LABEL: owner.name}},
        "spec": _template_spec(spec, domain, volumes),
    }
    return {
        "apiVersion": KUBEVIRT_API_VERSION,
        "kind": "VirtualMachine",
        "metadata": child_metadata(owner, owner.name),
        "spec": vm_spec,
    }
