"""KubeVirt admission-webhook rules, checked on our rendered VirtualMachine.

A bare API server (our tests, and any cluster where virt-api is down) accepts objects that KubeVirt's webhook
would reject, so the renderer checks them itself. Each rule cites the webhook behaviour it mirrors.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

RUN_STRATEGIES = frozenset({"Always", "Halted", "Manual", "RerunOnFailure", "Once"})
MAX_INLINE_CLOUD_INIT_BYTES = 2048


def virtual_machine_violations(vm: dict[str, Any]) -> list[str]:
    """Every rule of KubeVirt's VM/VMI admitters the rendered VM breaks (empty when it is admissible)."""
    problems: list[str] = []
    spec = vm.get("spec", {})
    if "running" in spec:
        problems.append("spec.running is deprecated and exclusive with runStrategy; use runStrategy only")
    if spec.get("runStrategy") not in RUN_STRATEGIES:
        problems.append(f"spec.runStrategy must be one of {sorted(RUN_STRATEGIES)}")
    template = spec.get("template", {}).get("spec", {})
    domain = template.get("domain", {})
    if "instancetype" in spec and ("cpu" in domain or "memory" in domain):
        problems.append("an instancetype excludes domain.cpu and domain.memory")

    efi = domain.get("firmware", {}).get("bootloader", {}).get("efi")
    secure_boot = efi is not None and efi.get("secureBoot", True)
    if secure_boot and not domain.get("features", {}).get("smm", {}).get("enabled", False):
        problems.append("SecureBoot requires SMM (domain.features.smm.enabled: true)")

    disks = domain.get("devices", {}).get("disks", [])
    volumes = template.get("volumes", [])
    return problems + _disk_and_volume_violations(disks, volumes)


def _disk_and_volume_violations(disks: list[Any], volumes: list[Any]) -> list[str]:
    """The admitters' rules on disks and volumes: unique names, one volume per disk, boot order, media."""
    problems: list[str] = []
    disk_names = [d.get("name") for d in disks]
    volume_names = [v.get("name") for v in volumes]
    for name, count in Counter(disk_names).items():
        if count > 1:
            problems.append(f"disk name {name!r} is used {count} times")
    for name, count in Counter(volume_names).items():
        if count > 1:
            problems.append(f"volume name {name!r} is used {count} times")
    if set(disk_names) - set(volume_names):
        problems.append(f"disks without a volume: {sorted(set(disk_names) - set(volume_names))}")
    if set(volume_names) - set(disk_names):
        problems.append(f"volumes without a disk: {sorted(set(volume_names) - set(disk_names))}")

    disks_by_name = {d.get("name"): d for d in disks}
    boot_orders = [d["bootOrder"] for d in disks if "bootOrder" in d]
    if len(boot_orders) != len(set(boot_orders)):
        problems.append("bootOrder values must be unique")
    for volume in volumes:
        disk = disks_by_name.get(volume.get("name"), {})
        if "sysprep" in volume and "cdrom" not in disk:
            problems.append(f"sysprep volume {volume.get('name')!r} must be attached as a cdrom")
        for source in ("cloudInitNoCloud", "cloudInitConfigDrive"):
            inline = volume.get(source, {}).get("userData", "")
            if len(inline.encode()) > MAX_INLINE_CLOUD_INIT_BYTES:
                problems.append(
                    f"{source}.userData exceeds {MAX_INLINE_CLOUD_INIT_BYTES} bytes; use secretRef"
                )
    return problems
