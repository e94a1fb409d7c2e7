"""The KubeVirt VirtualMachine, and the KubeVirt webhook rules we enforce because no webhook runs here."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from uds_vm_operator.api import SpecError, parse_vm_spec
from uds_vm_operator.render import ClusterFacts, Owner, live_migration_refusal
from uds_vm_operator.render.admission import virtual_machine_violations
from uds_vm_operator.render.virtualmachine import render_virtual_machine, stable_mac_address

OWNER = Owner("web", "apps", "uid-1")
BASE: dict[str, Any] = {"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}}
WINDOWS: dict[str, Any] = {"os": "windows", "source": {"dataSource": {"name": "win2022"}}}


def vm(raw: dict[str, Any], facts: ClusterFacts | None = None, **kwargs: Any) -> dict[str, Any]:
    return render_virtual_machine(OWNER, parse_vm_spec(raw), facts or ClusterFacts(), **kwargs)


def domain(manifest: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = manifest["spec"]["template"]["spec"]["domain"]
    return result


def volumes_by_name(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in manifest["spec"]["template"]["spec"]["volumes"]}


def disks_by_name(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in domain(manifest)["devices"]["disks"]}


@pytest.mark.parametrize("strategy", ["Always", "Halted", "Manual", "RerunOnFailure", "Once"])
def test_run_strategy_is_always_set_and_running_never(strategy: str) -> None:
    manifest = vm({**BASE, "runStrategy": strategy})
    assert manifest["spec"]["runStrategy"] == strategy
    assert "running" not in manifest["spec"]


def test_run_strategy_override_holds_the_vm_halted() -> None:
    assert vm({**BASE, "runStrategy": "Always"}, run_strategy="Halted")["spec"]["runStrategy"] == "Halted"
    with pytest.raises(SpecError, match="runStrategy"):
        vm(BASE, run_strategy="running")


def test_hardened_device_defaults() -> None:
    manifest = vm(BASE)
    devices = domain(manifest)["devices"]
    assert devices["autoattachGraphicsDevice"] is False
    [interface] = devices["interfaces"]
    assert {k: v for k, v in interface.items() if k != "macAddress"} == {"name": "default", "masquerade": {}}
    assert manifest["spec"]["template"]["spec"]["networks"] == [{"name": "default", "pod": {}}]
    labels = manifest["spec"]["template"]["metadata"]["labels"]
    assert labels["uds.dev/vm"] == "web", "the NetworkPolicy selects the virt-launcher pod by this label"


def test_cpu_memory_or_instancetype() -> None:
    sized = vm({**BASE, "resources": {"cpu": 4, "memory": "8Gi"}})
    assert domain(sized)["cpu"] == {"cores": 4}
    assert domain(sized)["memory"] == {"guest": "8Gi"}
    typed = vm({**BASE, "resources": {"instancetype": "u1.large", "preference": "ubuntu"}})
    assert typed["spec"]["instancetype"] == {"name": "u1.large"}
    assert typed["spec"]["preference"] == {"name": "ubuntu"}
    assert "cpu" not in domain(typed) and "memory" not in domain(typed)
    defaults = vm(BASE)
    assert (domain(defaults)["cpu"], domain(defaults)["memory"]) == ({"cores": 1}, {"guest": "1Gi"})


@pytest.mark.parametrize(
    ("firmware", "bootloader", "smm", "tpm"),
    [
        (None, {"bios": {}}, False, False),
        ({"type": "bios"}, {"bios": {}}, False, False),
        ({"type": "efi"}, {"efi": {"secureBoot": False}}, False, False),
        ({"type": "efi-secureboot"}, {"efi": {"secureBoot": True}}, True, False),
        ({"type": "efi-secureboot", "tpm": True}, {"efi": {"secureBoot": True}}, True, True),
    ],
)
def test_firmware_and_secure_boot_needs_smm(
    firmware: dict[str, Any] | None, bootloader: dict[str, Any], smm: bool, tpm: bool
) -> None:
    raw = {**BASE, **({"firmware": firmware} if firmware else {})}
    d = domain(vm(raw))
    assert d["firmware"]["bootloader"] == bootloader
    assert d.get("features", {}).get("smm") == ({"enabled": True} if smm else None)
    assert ("tpm" in d["devices"]) is tpm


def test_persistent_efi_and_tpm_only_when_the_cluster_can_store_them() -> None:
    raw = {**BASE, "firmware": {"type": "efi-secureboot", "tpm": True}}
    d = domain(vm(raw, ClusterFacts(persistent_vm_state=True)))
    assert d["firmware"]["bootloader"]["efi"]["persistent"] is True
    assert d["devices"]["tpm"] == {"persistent": True}
    assert domain(vm(raw))["devices"]["tpm"] == {}


def test_windows_defaults_to_secure_boot_tpm_and_hyperv() -> None:
    d = domain(vm(WINDOWS))
    assert d["firmware"]["bootloader"]["efi"]["secureBoot"] is True
    assert d["features"]["smm"] == {"enabled": True}
    assert "tpm" in d["devices"]
    hyperv = d["features"]["hyperv"]
    assert {"relaxed", "vapic", "synic", "vpindex", "synictimer"} <= set(hyperv)
    assert d["clock"]["timer"]["hpet"] == {"present": False}


def test_linux_disks_root_cloudinit_and_data() -> None:
    raw = {**BASE, "dataDisks": [{"name": "logs", "size": "1Gi"}]}
    manifest = vm(raw)
    volumes = volumes_by_name(manifest)
    disks = disks_by_name(manifest)
    assert volumes["rootdisk"]["dataVolume"] == {"name": "web-dv"}
    assert disks["rootdisk"]["bootOrder"] == 1
    assert volumes["cloudinit"]["cloudInitNoCloud"] == {"secretRef": {"name": "web-cloudinit"}}
    assert "userData" not in volumes["cloudinit"]["cloudInitNoCloud"]
    assert volumes["data-logs"]["persistentVolumeClaim"] == {"claimName": "web-data-logs"}
    assert disks["data-logs"]["disk"] == {"bus": "virtio"}


def test_windows_clone_sysprep_is_a_cdrom_and_root_is_virtio() -> None:
    manifest = vm({**WINDOWS, "windows": {"driverMedia": {"pvc": "virtio-win"}}})
    volumes = volumes_by_name(manifest)
    disks = disks_by_name(manifest)
    assert volumes["sysprep"]["sysprep"] == {"secret": {"name": "web-sysprep"}}
    assert disks["sysprep"] == {"name": "sysprep", "cdrom": {"bus": "sata"}}
    assert disks["rootdisk"]["disk"]["bus"] == "virtio"
    assert volumes["drivers"]["persistentVolumeClaim"] == {"claimName": "virtio-win", "readOnly": True}
    assert "cdrom" in disks["drivers"]
    assert "cloudinit" not in volumes


@pytest.mark.parametrize(
    ("driver_media", "root_bus"), [(None, "sata"), ({"dataSource": {"name": "virtio"}}, "virtio")]
)
def test_windows_iso_installs_onto_a_system_disk_from_a_cdrom(driver_media: Any, root_bus: str) -> None:
    windows: dict[str, Any] = {"sysprep": {"mode": "iso"}}
    if driver_media:
        windows["driverMedia"] = driver_media
    manifest = vm(
        {"os": "windows", "source": {"upload": {}}, "disk": {"virtualSize": "5Gi"}, "windows": windows}
    )
    volumes = volumes_by_name(manifest)
    disks = disks_by_name(manifest)
    assert volumes["rootdisk"]["dataVolume"] == {"name": "web-system"}
    assert volumes["installer"]["dataVolume"] == {"name": "web-dv"}
    assert disks["installer"]["cdrom"] == {"bus": "sata"}
    assert (disks["rootdisk"]["bootOrder"], disks["installer"]["bootOrder"]) == (1, 2)
    assert disks["rootdisk"]["disk"]["bus"] == root_bus


RWX = ["ReadWriteMany"]


@pytest.mark.parametrize(
    ("extra", "strategy"),
    [
        ({}, "None"),
        ({"liveMigration": True, "disk": {"virtualSize": "1Gi", "accessModes": RWX}}, "LiveMigrate"),
        (
            {"liveMigration": True, "allowLiveMigrateIfPossible": True},
            "LiveMigrateIfPossible",
        ),
        (
            {
                "liveMigration": True,
                "disk": {"virtualSize": "1Gi", "accessModes": RWX},
                "dataDisks": [{"name": "d", "size": "1Gi", "accessModes": RWX}],
            },
            "LiveMigrate",
        ),
    ],
)
def test_eviction_strategy(extra: dict[str, Any], strategy: str) -> None:
    manifest = vm({**BASE, **extra})
    assert manifest["spec"]["template"]["spec"]["evictionStrategy"] == strategy


@pytest.mark.parametrize(
    "extra",
    [
        {"liveMigration": True},
        {
            "liveMigration": True,
            "disk": {"virtualSize": "1Gi", "accessModes": RWX},
            "dataDisks": [{"name": "d", "size": "1Gi"}],
        },
    ],
)
def test_live_migration_on_rwo_is_refused_with_a_reason(extra: dict[str, Any]) -> None:
    spec = parse_vm_spec({**BASE, **extra})
    reason = live_migration_refusal(spec)
    assert reason is not None and "ReadWriteMany" in reason and "allowLiveMigrateIfPossible" in reason
    with pytest.raises(SpecError, match="ReadWriteMany"):
        render_virtual_machine(OWNER, spec, ClusterFacts())


def test_no_refusal_without_live_migration() -> None:
    assert live_migration_refusal(parse_vm_spec(BASE)) is None


# ----------------------------------------------------------------------------- webhook-equivalent rules


def test_every_rendered_variant_passes_the_webhook_rules() -> None:
    variants = [
        BASE,
        {**BASE, "firmware": {"type": "efi-secureboot", "tpm": True}},
        {**BASE, "resources": {"instancetype": "u1.small"}, "dataDisks": [{"name": "a", "size": "1Gi"}]},
        WINDOWS,
        {"os": "windows", "source": {"upload": {}}, "disk": {"virtualSize": "5Gi"}},
        {**WINDOWS, "windows": {"driverMedia": {"dataSource": {"name": "v"}}}},
    ]
    for raw in variants:
        assert virtual_machine_violations(vm(raw)) == [], raw


def _broken(mutate: Any) -> list[str]:
    manifest = copy.deepcopy(vm({**BASE, "firmware": {"type": "efi-secureboot"}}))
    mutate(manifest)
    return virtual_machine_violations(manifest)


def _template(m: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = m["spec"]["template"]["spec"]
    return result


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda m: m["spec"].__setitem__("running", True), "spec.running"),
        (lambda m: m["spec"].pop("runStrategy"), "runStrategy"),
        (lambda m: _template(m)["domain"].pop("features"), "SecureBoot requires SMM"),
        (lambda m: _template(m)["volumes"].pop(), "disks without a volume"),
        (lambda m: _template(m)["domain"]["devices"]["disks"].pop(), "volumes without a disk"),
        (
            lambda m: _template(m)["domain"]["devices"]["disks"].append(
                _template(m)["domain"]["devices"]["disks"][0]
            ),
            "used 2 times",
        ),
        (
            lambda m: _template(m)["volumes"][-1].__setitem__("cloudInitNoCloud", {"userData": "x" * 2049}),
            "2048",
        ),
        (lambda m: m["spec"].__setitem__("instancetype", {"name": "u1"}), "instancetype excludes"),
        (
            lambda m: _template(m)["domain"]["devices"]["disks"][-1].__setitem__("bootOrder", 1),
            "bootOrder",
        ),
    ],
)
def test_the_webhook_checker_catches_each_rule(mutate: Any, fragment: str) -> None:
    assert any(fragment in problem for problem in _broken(mutate))


def test_sysprep_volume_as_a_plain_disk_is_caught() -> None:
    manifest = copy.deepcopy(vm(WINDOWS))
    for disk in domain(manifest)["devices"]["disks"]:
        if disk["name"] == "sysprep":
            disk.pop("cdrom")
            disk["disk"] = {"bus": "sata"}
    assert any("cdrom" in problem for problem in virtual_machine_violations(manifest))


def test_the_guest_nic_keeps_its_mac_across_starts() -> None:
    """A restart must not hand the guest a new NIC (its network config may be bound to the MAC)."""
    first = domain(vm(BASE))["devices"]["interfaces"][0]["macAddress"]
    assert first == domain(vm(BASE))["devices"]["interfaces"][0]["macAddress"]
    octets = [int(part, 16) for part in first.split(":")]
    assert len(octets) == 6 and octets[0] & 0x02 and not octets[0] & 0x01, "locally administered unicast"
    other = stable_mac_address(Owner(name="db", namespace="apps", uid="u2"))
    assert other != first
