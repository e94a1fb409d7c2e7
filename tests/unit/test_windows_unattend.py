"""Every Windows variant: the answer file is well-formed XML with the passes of its mode, under the key
KubeVirt reads, and the Administrator password is confined to the two Secrets. Windows 11 / Server 2022
defaults per mode.
"""

from __future__ import annotations

import base64
import itertools
import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from uds_vm_operator.api import parse_vm_spec
from uds_vm_operator.render import ClusterFacts, Owner, render_children

NS = {"u": "urn:schemas-microsoft-com:unattend"}
WCM = "{http://schemas.microsoft.com/WMIConfig/2002/State}"
OWNER = Owner("win-01", "apps", "uid-9")
PASSWORDS = ("Plain-Passw0rd!", "<&>'\"]]>--Pw1", "Pässwörd-ÜTF8-1")
MODES = {"iso": ["windowsPE", "specialize", "oobeSystem"], "clone": ["specialize", "oobeSystem"]}


def spec(mode: str, *, drivers: bool, golden: bool, firmware: str | None) -> dict[str, Any]:
    windows: dict[str, Any] = {"sysprep": {"mode": mode}}
    if drivers:
        windows["driverMedia"] = {"dataSource": {"name": "virtio-win"}}
    if golden:
        windows["goldenImage"] = {"name": "win11", "version": 1}
    raw: dict[str, Any] = {
        "os": "windows",
        "source": {"http": {"url": "https://x/win11.iso"}}
        if mode == "iso"
        else {"dataSource": {"name": "win11"}},
        "windows": windows,
    }
    if mode == "iso":
        raw["disk"] = {"virtualSize": "5Gi"}
    if firmware:
        raw["firmware"] = {"type": firmware, "tpm": True}
    return raw


VARIANTS = [
    pytest.param(mode, drivers, golden, firmware, id=f"{mode}-drivers{drivers:d}-golden{golden:d}-{firmware}")
    for mode, drivers, golden, firmware in itertools.product(
        ("iso", "clone"), (False, True), (False, True), (None, "bios", "efi")
    )
]


def children(
    raw: dict[str, Any], password: str, facts: ClusterFacts | None = None
) -> dict[str, dict[str, Any]]:
    rendered = render_children(
        OWNER, parse_vm_spec(raw), facts or ClusterFacts(), windows_admin_password=password
    )
    return {f"{c['kind']}/{c['metadata']['name']}": c for c in rendered}


@pytest.mark.parametrize(("mode", "drivers", "golden", "firmware"), VARIANTS)
@pytest.mark.parametrize("password", PASSWORDS)
def test_answer_file_is_well_formed_with_the_passes_of_its_mode(
    mode: str, drivers: bool, golden: bool, firmware: str | None, password: str
) -> None:
    rendered = children(spec(mode, drivers=drivers, golden=golden, firmware=firmware), password)
    data = rendered["Secret/win-01-sysprep"]["data"]
    expected_key = "autounattend.xml" if mode == "iso" else "unattend.xml"
    assert list(data) == [expected_key]  # lower case: what KubeVirt's sysprep volume looks for
    document = base64.b64decode(data[expected_key])
    assert document.startswith(b'<?xml version="1.0" encoding="utf-8"?>')
    root = ET.fromstring(document)  # raises on malformed XML
    assert root.tag == "{urn:schemas-microsoft-com:unattend}unattend"
    assert [s.get("pass") for s in root.findall("u:settings", NS)] == MODES[mode]
    for component in root.iter("{urn:schemas-microsoft-com:unattend}component"):
        assert component.get("processorArchitecture") == "amd64" and component.get("name")
    assert root.findtext(".//u:AdministratorPassword/u:Value", None, NS) == password
    for added in root.iter():
        if added.get(f"{WCM}action") is not None:
            assert added.get(f"{WCM}action") == "add"

    generalizes = any(
        "sysprep.exe /generalize /oobe /shutdown" in (c.text or "")
        for c in root.iter("{urn:schemas-microsoft-com:unattend}CommandLine")
    )
    assert generalizes == (golden and mode == "iso"), "only a golden-image build generalizes itself"
    driver_paths = (
        root.find(".//u:component[@name='Microsoft-Windows-PnpCustomizationsWinPE']", NS)
        if mode == "iso"
        else None
    )
    assert (driver_paths is not None) == (drivers and mode == "iso")

    partitions = [p.findtext("u:Type", None, NS) for p in root.findall(".//u:CreatePartition", NS)]
    if mode == "iso":
        assert partitions == (["Primary"] if firmware == "bios" else ["EFI", "MSR", "Primary"])


@pytest.mark.parametrize(("mode", "drivers", "golden", "firmware"), VARIANTS)
def test_password_is_only_in_the_two_secrets(
    mode: str, drivers: bool, golden: bool, firmware: str | None
) -> None:
    password = PASSWORDS[1]
    rendered = children(spec(mode, drivers=drivers, golden=golden, firmware=firmware), password)
    holders = []
    for name, child in rendered.items():
        plain = json.dumps(child)
        decoded = " ".join(base64.b64decode(v).decode() for v in (child.get("data") or {}).values())
        escaped = password.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        if password in plain or password in decoded or escaped in decoded:
            holders.append(name)
    assert holders == ["Secret/win-01-admin", "Secret/win-01-sysprep"]


@pytest.mark.parametrize("mode", ["iso", "clone"])
@pytest.mark.parametrize("persistent", [False, True])
def test_windows_11_defaults_secure_boot_smm_tpm_hyperv(mode: str, persistent: bool) -> None:
    raw = spec(mode, drivers=False, golden=False, firmware=None)
    vm = children(raw, PASSWORDS[0], ClusterFacts(persistent_vm_state=persistent))["VirtualMachine/win-01"]
    domain = vm["spec"]["template"]["spec"]["domain"]
    efi = domain["firmware"]["bootloader"]["efi"]
    assert efi["secureBoot"] is True and domain["features"]["smm"] == {"enabled": True}
    assert efi.get("persistent", False) is persistent
    assert domain["devices"]["tpm"] == ({"persistent": True} if persistent else {})
    hyperv = domain["features"]["hyperv"]
    assert {"relaxed", "vapic", "spinlocks", "vpindex", "runtime", "synic", "synictimer", "reset"} <= set(
        hyperv
    )
    assert hyperv["synictimer"] == {"direct": {}}  # synictimer needs synic, which needs vpindex: all present
    disks = {d["name"]: d for d in domain["devices"]["disks"]}
    assert disks["sysprep"]["cdrom"]["bus"] == "sata"
    if mode == "iso":
        assert disks["installer"]["cdrom"]["bus"] == "sata"
        assert disks["rootdisk"]["disk"]["bus"] == "sata"  # Setup has no virtio driver without driver media
    else:
        assert disks["rootdisk"]["disk"]["bus"] == "virtio"


@pytest.mark.parametrize("mode", ["iso", "clone"])
def test_specialize_prevents_automatic_device_encryption(mode: str) -> None:
    rendered = children(spec(mode, drivers=False, golden=False, firmware=None), PASSWORDS[0])
    ((document,),) = [[base64.b64decode(v) for v in rendered["Secret/win-01-sysprep"]["data"].values()]]
    specialize = ET.fromstring(document).find("u:settings[@pass='specialize']", NS)
    assert specialize is not None
    paths = [p.text or "" for p in specialize.iter("{urn:schemas-microsoft-com:unattend}Path")]
    assert any("\\Control\\BitLocker" in p and "PreventDeviceEncryption" in p and "/d 1" in p for p in paths)
    orders = [int(o.text or 0) for o in specialize.iter("{urn:schemas-microsoft-com:unattend}Order")]
    assert orders == list(range(1, len(orders) + 1)), "RunSynchronousCommand orders must be 1..n"
