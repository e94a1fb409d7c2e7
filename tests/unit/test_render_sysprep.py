"""Windows: unattend files per mode, the key casing KubeVirt reads, NetBIOS names, password containment."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from typing import Any
from xml.sax.saxutils import escape

import pytest

from uds_vm_operator.api import SpecError, netbios_problem, parse_vm_spec
from uds_vm_operator.render import ClusterFacts, Owner, generate_admin_password, render_children
from uds_vm_operator.render.secrets import PASSWORD_LENGTH, render_admin_secret
from uds_vm_operator.render.sysprep import (
    AUTOUNATTEND_KEY,
    UNATTEND_KEY,
    derive_computer_name,
    render_sysprep_secret,
    sysprep_mode,
)

NS = {"u": "urn:schemas-microsoft-com:unattend"}
PASSWORD = "S3cret<&>'\"-Pw"
OWNER = Owner("win-app", "apps", "uid-1")


def windows(source: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"os": "windows", "source": source or {"dataSource": {"name": "win2022"}}}
    if "disk" not in extra and not (source is None or "dataSource" in source or "pvc" in source):
        raw["disk"] = {"virtualSize": "5Gi"}
    if extra:
        raw["windows"] = extra
    return raw


def unattend(raw: dict[str, Any], owner: Owner = OWNER, efi: bool = True) -> tuple[str, ET.Element]:
    secret = render_sysprep_secret(owner, parse_vm_spec(raw), PASSWORD, efi=efi)
    ((key, value),) = secret["data"].items()
    document = base64.b64decode(value).decode()
    return key, ET.fromstring(document.encode())  # well-formed, or this raises


def passes(root: ET.Element) -> list[str]:
    return [settings.get("pass", "") for settings in root.findall("u:settings", NS)]


@pytest.mark.parametrize(
    ("source", "declared", "mode"),
    [
        ({"upload": {}}, "auto", "iso"),
        ({"http": {"url": "https://x/win.iso"}}, "auto", "iso"),
        ({"s3": {"url": "s3://b/win.iso"}}, "auto", "iso"),
        ({"dataSource": {"name": "golden"}}, "auto", "clone"),
        ({"pvc": {"name": "golden"}}, "auto", "clone"),
        ({"registry": {"url": "docker://r/win"}}, "auto", "clone"),
        ({"upload": {}}, "clone", "clone"),
        ({"dataSource": {"name": "golden"}}, "iso", "iso"),
    ],
)
def test_mode_resolution(source: dict[str, Any], declared: str, mode: str) -> None:
    assert sysprep_mode(parse_vm_spec(windows(source, sysprep={"mode": declared}))) == mode


def test_linux_has_no_sysprep_mode() -> None:
    assert sysprep_mode(parse_vm_spec({"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}})) is None


def test_iso_mode_autounattend_with_every_pass() -> None:
    key, root = unattend(windows({"upload": {}}, sysprep={"mode": "iso"}, imageIndex=2))
    assert key == AUTOUNATTEND_KEY == "autounattend.xml", "KubeVirt compares lower-cased names"
    assert passes(root) == ["windowsPE", "specialize", "oobeSystem"]
    assert root.find(".//u:DiskConfiguration/u:Disk/u:WillWipeDisk", NS).text == "true"  # type: ignore[union-attr]
    partitions = [p.text for p in root.findall(".//u:CreatePartition/u:Type", NS)]
    assert partitions == ["EFI", "MSR", "Primary"]
    assert root.find(".//u:InstallTo/u:PartitionID", NS).text == "3"  # type: ignore[union-attr]
    assert root.find(".//u:InstallFrom/u:MetaData/u:Value", NS).text == "2"  # type: ignore[union-attr]
    assert root.find(".//u:AcceptEula", NS).text == "true"  # type: ignore[union-attr]


def test_iso_mode_on_bios_uses_one_active_partition() -> None:
    _, root = unattend(windows({"upload": {}}, sysprep={"mode": "iso"}), efi=False)
    assert [p.text for p in root.findall(".//u:CreatePartition/u:Type", NS)] == ["Primary"]
    assert root.find(".//u:ModifyPartition/u:Active", NS).text == "true"  # type: ignore[union-attr]


def test_iso_mode_loads_virtio_drivers_when_media_is_attached() -> None:
    _, plain = unattend(windows({"upload": {}}, sysprep={"mode": "iso"}))
    assert plain.find(".//u:DriverPaths", NS) is None
    _, with_drivers = unattend(
        windows({"upload": {}}, sysprep={"mode": "iso"}, driverMedia={"pvc": "virtio-win"})
    )
    assert len(with_drivers.findall(".//u:DriverPaths/u:PathAndCredentials", NS)) >= 2


def test_clone_mode_unattend_has_only_specialize_and_oobe() -> None:
    key, root = unattend(windows(computerName="APP-01"))
    assert key == UNATTEND_KEY == "unattend.xml"
    assert passes(root) == ["specialize", "oobeSystem"]
    assert root.find(".//u:ComputerName", NS).text == "APP-01"  # type: ignore[union-attr]


def test_admin_password_is_escaped_and_in_the_oobe_pass() -> None:
    _, root = unattend(windows())
    value = root.find(".//u:UserAccounts/u:AdministratorPassword/u:Value", NS)
    assert value is not None and value.text == PASSWORD


def test_golden_image_build_generalizes_and_shuts_down() -> None:
    _, root = unattend(
        windows({"upload": {}}, sysprep={"mode": "iso"}, goldenImage={"name": "win2022", "version": 2})
    )
    commands = [
        c.text or "" for c in root.findall(".//u:FirstLogonCommands/u:SynchronousCommand/u:CommandLine", NS)
    ]
    assert any("Panther\\unattend.xml" in c for c in commands), (
        "a cached answer file would override the clones'"
    )
    assert any("sysprep.exe /generalize /oobe /shutdown" in c for c in commands)
    _, ordinary = unattend(windows({"upload": {}}, sysprep={"mode": "iso"}))
    assert ordinary.find(".//u:FirstLogonCommands", NS) is None


@pytest.mark.parametrize(
    ("vm_name", "expected"),
    [
        ("web", "WEB"),
        ("win-app", "WIN-APP"),
        ("very-long-vm-name-01", "VERY-LONG-VM-NA"),
        ("abcdefghijklmn-x", "ABCDEFGHIJKLMN"),
        ("a123456789012345", "A12345678901234"),
    ],
)
def test_computer_name_is_derived_from_the_vm_name(vm_name: str, expected: str) -> None:
    derived = derive_computer_name(vm_name)
    assert derived == expected
    assert netbios_problem(derived) is None


@pytest.mark.parametrize("vm_name", ["1234", "12345678901234567", "x", "a-" * 20])
def test_derived_names_are_always_netbios_valid(vm_name: str) -> None:
    assert netbios_problem(derive_computer_name(vm_name)) is None


def test_empty_password_is_refused() -> None:
    with pytest.raises(SpecError, match="Administrator password"):
        render_sysprep_secret(OWNER, parse_vm_spec(windows()), "", efi=True)


def test_generated_password_strength() -> None:
    passwords = {generate_admin_password() for _ in range(20)}
    assert len(passwords) == 20
    for password in passwords:
        assert len(password) == PASSWORD_LENGTH
        assert any(c.islower() for c in password) and any(c.isupper() for c in password)
        assert any(c.isdigit() for c in password) and any(not c.isalnum() for c in password)


def test_admin_secret() -> None:
    secret = render_admin_secret(OWNER, PASSWORD)
    assert secret["metadata"]["name"] == "win-app-admin"
    assert base64.b64decode(secret["data"]["password"]).decode() == PASSWORD
    assert secret["metadata"]["ownerReferences"] == [OWNER.reference()]


def _children(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return render_children(OWNER, parse_vm_spec(raw), ClusterFacts(), windows_admin_password=PASSWORD)


def test_password_appears_only_inside_secrets() -> None:
    for raw in (windows(), windows({"upload": {}}, sysprep={"mode": "iso"})):
        children = _children(raw)
        holders = []
        for child in children:
            text = json.dumps(child)
            decoded = " ".join(base64.b64decode(v).decode() for v in child.get("data", {}).values())
            forms = (PASSWORD, escape(PASSWORD), json.dumps(PASSWORD)[1:-1])
            if any(form in text or form in decoded for form in forms):
                holders.append((child["kind"], child["metadata"]["name"]))
        assert holders == [("Secret", "win-app-admin"), ("Secret", "win-app-sysprep")]
        assert PASSWORD not in json.dumps(parse_vm_spec(raw).to_json_dict())


def test_referenced_password_renders_no_admin_secret() -> None:
    names = [c["metadata"]["name"] for c in _children(windows(adminPasswordSecretRef={"name": "my-admin"}))]
    assert "win-app-admin" not in names and "win-app-sysprep" in names


def test_windows_without_a_password_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="Administrator password"):
        render_children(OWNER, parse_vm_spec(windows()), ClusterFacts())
