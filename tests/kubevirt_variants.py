"""The renderer's option space, enumerated: every VirtualMachine the operator can render, by name.

Why one module: the same variants are judged by KubeVirt's CRD schemas offline (every tag in
KUBEVIRT_SCHEMA_VERSIONS, tests/unit) and by the real virt-api's admission webhooks on the node (tests/node).
A renderer change that adds a field or a combination shows up in both without editing either test.

The product runs over the axes that change the VirtualMachine manifest (OS, firmware and TPM, KubeVirt's
VM-state storage class, data disks, live migration, sizing); the axes that do not change the KubeVirt object
but are part of what a user can ask for (source kind, Windows sysprep mode and driver media, run strategy,
exposure, pool membership) are rotated through the product deterministically, so every value of every axis
occurs many times. Specs our own API refuses (SpecError) are collected apart: they must never reach KubeVirt.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from uds_vm_operator.api import parse_vm_spec
from uds_vm_operator.api.errors import SpecError
from uds_vm_operator.controller.reconciler import member_pod_labels
from uds_vm_operator.fleet.members import PoolRef, render_member
from uds_vm_operator.render import ClusterFacts, Owner, render_children

SHA = "sha256:" + "e" * 64
ADMIN_PASSWORD = "Generated-Passw0rd!"
INSTANCETYPE = "uds-small"
PREFERENCE = "uds-linux"

FIRMWARES: tuple[dict[str, Any] | None, ...] = (
    None,
    {"type": "bios"},
    {"type": "bios", "tpm": True},
    {"type": "efi"},
    {"type": "efi", "tpm": True},
    {"type": "efi-secureboot"},
    {"type": "efi-secureboot", "tpm": True},
)
DATA_DISKS: tuple[tuple[dict[str, Any], ...], ...] = (
    (),
    (
        {"name": "logs", "size": "2Gi"},
        {"name": "db", "size": "4Gi", "volumeMode": "Block", "accessModes": ["ReadWriteMany"]},
    ),
)
MIGRATION = ("off", "rwx", "if-possible")
SIZING: tuple[dict[str, Any] | None, ...] = (
    None,
    {"cpu": 4, "memory": "8Gi"},
    {"instancetype": INSTANCETYPE, "preference": PREFERENCE},
    {"preference": PREFERENCE},
)
LINUX_SOURCES: tuple[dict[str, Any], ...] = (
    {"upload": {"checksum": SHA}},
    {"http": {"url": "https://img.example/x.qcow2", "checksum": SHA}},
    {"registry": {"url": "docker://registry.example/disk:1"}},
    {"s3": {"url": "s3://bucket/disk.qcow2", "secretRef": "s3-creds"}},
    {"dataSource": {"name": "golden"}},
    {"pvc": {"name": "base"}},
    {"blank": {}},
)
WINDOWS_SOURCES: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = (
    ({"upload": {}}, {"sysprep": {"mode": "iso"}, "driverMedia": {"dataSource": {"name": "virtio-win"}}}),
    ({"http": {"url": "https://img.example/win.iso", "checksum": SHA}}, {"sysprep": {"mode": "iso"}}),
    ({"upload": {}}, {"sysprep": {"mode": "iso"}, "driverMedia": {"pvc": "virtio-win"}}),
    ({"dataSource": {"name": "win-golden"}}, {}),
    ({"pvc": {"name": "win-base"}}, {"sysprep": {"mode": "clone"}, "driverMedia": {"pvc": "virtio-win"}}),
)
RUN_STRATEGIES = ("Always", "Halted", "Manual", "RerunOnFailure", "Once")
EXPOSURES: tuple[list[dict[str, Any]], ...] = (
    [],
    [{"port": 22}],
    [{"port": 443, "http": {"hostname": "app.example.com", "gateway": {"name": "g", "namespace": "gw"}}}],
)


@dataclass
class Variants:
    """The enumeration's outcome: VMs to submit (distinct manifests), and specs our own API refused."""

    vms: dict[str, dict[str, Any]] = field(default_factory=dict)
    """name -> rendered VirtualMachine, one per distinct manifest (metadata aside)."""
    combinations: int = 0
    refused: dict[str, str] = field(default_factory=dict)
    """name -> our SpecError message."""


def _spec(index: int, axes: tuple[Any, ...]) -> dict[str, Any]:
    os_name, firmware, _persistent, data_disks, migration, sizing = axes
    rwx = migration == "rwx"
    spec: dict[str, Any] = {"os": os_name, "runStrategy": RUN_STRATEGIES[index % len(RUN_STRATEGIES)]}
    if os_name == "linux":
        spec["source"] = LINUX_SOURCES[index % len(LINUX_SOURCES)]
        spec["cloudInit"] = {"sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEx4mpl3 k@host"]}
    else:
        source, windows = WINDOWS_SOURCES[index % len(WINDOWS_SOURCES)]
        spec["source"], spec["windows"] = source, windows
    spec["disk"] = {"virtualSize": "10Gi", **({"accessModes": ["ReadWriteMany"]} if rwx else {})}
    disks = [dict(disk) for disk in data_disks]
    if rwx:
        for disk in disks:
            disk["accessModes"] = ["ReadWriteMany"]
    if disks:
        spec["dataDisks"] = disks
    if migration != "off":
        spec["liveMigration"] = True
        spec["allowLiveMigrateIfPossible"] = migration == "if-possible"
    if firmware is not None:
        spec["firmware"] = firmware
    if sizing is not None:
        spec["resources"] = sizing
    spec["network"] = {"expose": EXPOSURES[index % len(EXPOSURES)]}
    return spec


def _as_member(index: int, spec: dict[str, Any]) -> tuple[Owner, dict[str, Any]]:
    """Every third combination goes through the pool's member rendering, as the pool controller does, and
    the member's labels reach its launcher pod as the VM controller carries them."""
    pool = PoolRef(name=f"pool{index}", namespace="apps", uid=f"pool-uid-{index}")
    member = render_member(
        pool, {"metadata": {"labels": {"tier": "web"}}, "spec": spec}, ordinal=1, revision="r1"
    )
    name = member["metadata"]["name"]
    owner = Owner(name, "apps", f"uid-{index}", pod_labels=member_pod_labels(member["metadata"]))
    return owner, member["spec"]


def _combinations() -> Iterator[tuple[int, tuple[Any, ...]]]:
    axes = itertools.product(("linux", "windows"), FIRMWARES, (False, True), DATA_DISKS, MIGRATION, SIZING)
    yield from enumerate(axes)


def _signature(vm: dict[str, Any]) -> str:
    return json.dumps(vm["spec"], sort_keys=True)


def enumerate_variants() -> Variants:
    """Render every combination; keep one VM per distinct spec (a later node test submits each once)."""
    out = Variants()
    seen: set[str] = set()
    for index, axes in _combinations():
        out.combinations += 1
        owner, spec = Owner(f"vm{index}", "apps", f"uid-{index}"), _spec(index, axes)
        if index % 3 == 2:
            owner, spec = _as_member(index, spec)
        name = owner.name
        try:
            children = render_children(
                owner,
                parse_vm_spec(spec),
                ClusterFacts(cdi_http_checksum=True, persistent_vm_state=axes[2]),
                windows_admin_password=ADMIN_PASSWORD,
            )
        except SpecError as error:
            out.refused[name] = str(error)
            continue
        vm = next(child for child in children if child["kind"] == "VirtualMachine")
        signature = _signature(vm)
        if signature not in seen:
            seen.add(signature)
            out.vms[name] = vm
    return out


def vm_kubevirt_paths(value: Any, prefix: str = "") -> set[str]:
    """Every field path (list indices dropped) a manifest uses: the 'fields the renderer emits'."""
    paths: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}"
            paths.add(path)
            paths |= vm_kubevirt_paths(item, path)
    elif isinstance(value, list):
        for item in value:
            paths |= vm_kubevirt_paths(item, f"{prefix}[]")
    return paths
