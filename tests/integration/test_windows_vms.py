"""Windows VMs through the real operator and the real API server (the test plays CDI and KubeVirt).

- ``iso`` and ``clone`` VMs: every child is applied by the operator with ``fieldValidation=Strict`` against
  the upstream KubeVirt/CDI CRDs, then read back (secure boot + SMM, TPM, Hyper-V, buses, sysprep).
- The Administrator password lives only in the two Secrets: never in the KubeVirt VM, the UDSVirtualMachine,
  its status, Events, or the operator's own log (captured by the harness and grepped here).
- Rotation: replacing the credentials Secret re-renders the sysprep Secret.
- Invalid computer names are rejected by the API server itself (CRD CEL), with a message that says why.
"""

from __future__ import annotations

import base64
import functools
import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from tests.integration.operator_fixtures import api, core_path, dv_path, kv_path, operator, status_of, vm_path
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api", "operator"]  # fixtures used by name

NS = {"u": "urn:schemas-microsoft-com:unattend"}
ISO_URL = "https://images.site.internal/windows-server-2022.iso"


def windows_vm(name: str, namespace: str, *, mode: str, **windows: Any) -> dict[str, Any]:
    source: dict[str, Any]
    if mode == "iso":
        source = {"http": {"url": ISO_URL}}
    else:
        source = {"dataSource": {"name": "win2022", "namespace": namespace}}
    spec: dict[str, Any] = {
        "os": "windows",
        "source": source,
        "resources": {"cpu": 2, "memory": "4Gi"},
        "windows": {"sysprep": {"mode": mode}, **windows},
    }
    if mode == "iso":
        spec["disk"] = {"virtualSize": "6Mi"}
        spec["windows"].setdefault("systemDiskSize", "20Mi")
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def secret_value(api: Api, namespace: str, name: str, key: str) -> str | None:
    secret = api.get(core_path(namespace, "secrets", name))
    value = ((secret or {}).get("data") or {}).get(key)
    return base64.b64decode(value).decode() if value else None


def unattend_of(api: Api, namespace: str, vm: str) -> tuple[str, ET.Element]:
    secret = api.get(core_path(namespace, "secrets", f"{vm}-sysprep"))
    assert secret is not None, f"{vm}-sysprep was not created"
    ((key, value),) = secret["data"].items()
    return key, ET.fromstring(base64.b64decode(value))


def admin_password_in_unattend(root: ET.Element) -> str | None:
    return root.findtext(".//u:UserAccounts/u:AdministratorPassword/u:Value", None, NS)


def unattend_carries(api: Api, namespace: str, vm: str, password: str) -> bool:
    return admin_password_in_unattend(unattend_of(api, namespace, vm)[1]) == password


def wait_child(api: Api, path: str, what: str, operator: OperatorProcess) -> dict[str, Any]:
    try:
        return wait_for(lambda: api.get(path), 60, 0.2, what=what)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{operator.logs()}") from None


def events_text(api: Api, namespace: str) -> str:
    return json.dumps(api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"))


def domain_of(vm: dict[str, Any]) -> dict[str, Any]:
    return dict(vm["spec"]["template"]["spec"]["domain"])


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


def test_iso_and_clone_windows_vms_pass_strict_validation_and_keep_the_password_in_secrets(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    driver_media = {"dataSource": {"name": "virtio-win", "namespace": namespace}}
    api.apply(
        windows_vm("win-iso", namespace, mode="iso", driverMedia=driver_media, computerName="BUILD-01"),
        vm_path(namespace, "win-iso"),
    )
    api.apply(windows_vm("win-clone", namespace, mode="clone"), vm_path(namespace, "win-clone"))

    iso_vm = wait_child(api, kv_path(namespace, "win-iso"), "KubeVirt VM win-iso", operator)
    clone_vm = wait_child(api, kv_path(namespace, "win-clone"), "KubeVirt VM win-clone", operator)
    for name in ("win-iso-dv", "win-iso-system", "win-iso-drivers", "win-clone-dv"):
        assert api.get(dv_path(namespace, name)) is not None, f"DataVolume {name} missing\n{operator.logs()}"

    # Windows 11 / Server 2022 defaults, as stored by the API server after Strict validation.
    for vm in (iso_vm, clone_vm):
        domain = domain_of(vm)
        assert domain["firmware"]["bootloader"]["efi"]["secureBoot"] is True
        assert domain["features"]["smm"]["enabled"] is True  # KubeVirt refuses secure boot without SMM
        assert "tpm" in domain["devices"]
        hyperv = domain["features"]["hyperv"]
        assert {"relaxed", "vapic", "spinlocks", "vpindex", "synic", "synictimer", "reset"} <= set(hyperv)
        assert hyperv["spinlocks"]["spinlocks"] == 8191
        volumes = by_name(vm["spec"]["template"]["spec"]["volumes"])
        assert volumes["sysprep"]["sysprep"]["secret"]["name"] == f"{vm['metadata']['name']}-sysprep"
        assert by_name(domain["devices"]["disks"])["sysprep"]["cdrom"]["bus"] == "sata"

    iso_disks = by_name(domain_of(iso_vm)["devices"]["disks"])
    assert iso_disks["installer"]["cdrom"]["bus"] == "sata"
    assert iso_disks["rootdisk"]["disk"]["bus"] == "virtio"  # virtio drivers are on the driver media
    assert "cdrom" in iso_disks["drivers"]
    assert by_name(domain_of(clone_vm)["devices"]["disks"])["rootdisk"]["disk"]["bus"] == "virtio"

    iso_key, iso_root = unattend_of(api, namespace, "win-iso")
    clone_key, clone_root = unattend_of(api, namespace, "win-clone")
    assert (iso_key, clone_key) == ("autounattend.xml", "unattend.xml")
    assert [s.get("pass") for s in iso_root.findall("u:settings", NS)] == [
        "windowsPE",
        "specialize",
        "oobeSystem",
    ]
    assert [s.get("pass") for s in clone_root.findall("u:settings", NS)] == ["specialize", "oobeSystem"]
    assert iso_root.findtext(".//u:ComputerName", None, NS) == "BUILD-01"
    assert clone_root.findtext(".//u:ComputerName", None, NS) == "WIN-CLONE"

    passwords = {}
    for name, root in (("win-iso", iso_root), ("win-clone", clone_root)):
        password = secret_value(api, namespace, f"{name}-admin", "password")
        assert password and len(password) >= 22, "a generated password must carry >= 128 bits"
        assert admin_password_in_unattend(root) == password
        passwords[name] = password
    assert passwords["win-iso"] != passwords["win-clone"]

    operator.wait_quiet(minimum=2)
    leaks = {
        "KubeVirt VMs": json.dumps(api.items(kv_path(namespace))),
        "UDSVirtualMachines (spec, status)": json.dumps(api.items(vm_path(namespace))),
        "DataVolumes": json.dumps(api.items(dv_path(namespace))),
        "Events": events_text(api, namespace),
        "operator log": operator.log_path.read_text(errors="replace"),
    }
    assert "win-iso-sysprep" in leaks["operator log"], "the log capture must hold the operator's output"
    for where, text in leaks.items():
        for password in passwords.values():
            encoded = base64.b64encode(password.encode()).decode()
            assert password not in text and encoded not in text, f"Administrator password leaked into {where}"


def test_replacing_the_credentials_secret_re_renders_the_sysprep_secret(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    api.apply(windows_vm("win", namespace, mode="clone"), vm_path(namespace, "win"))
    wait_child(api, core_path(namespace, "secrets", "win-sysprep"), "sysprep Secret", operator)
    first = secret_value(api, namespace, "win-admin", "password")
    assert first is not None

    # 1. The generated Secret is deleted: a new password is generated and the answer file follows it.
    api.delete(core_path(namespace, "secrets", "win-admin"))

    def rotated() -> str | None:
        second = secret_value(api, namespace, "win-admin", "password")
        in_unattend = admin_password_in_unattend(unattend_of(api, namespace, "win")[1])
        return second if second and second != first and in_unattend == second else None

    wait_for(rotated, 60, 0.2, what="a new generated password in both Secrets")

    # 2. The user brings their own Secret and replaces it with a new one (the reference names the new one).
    for secret_name, password in (("creds-2026-11", "Old-Pa55word!x"), ("creds-2026-12", "New-Pa55word!y")):
        api.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret_name, "namespace": namespace},
                "stringData": {"password": password},
            },
            core_path(namespace, "secrets", secret_name),
        )
        manifest = windows_vm("win", namespace, mode="clone", adminPasswordSecretRef={"name": secret_name})
        api.apply(manifest, vm_path(namespace, "win"))
        wait_for(
            functools.partial(unattend_carries, api, namespace, "win", password),
            60,
            0.2,
            what=f"the sysprep Secret carrying the password of {secret_name}",
        )
    operator.wait_quiet(minimum=1)
    for text in (
        json.dumps(api.items(vm_path(namespace))),
        events_text(api, namespace),
        operator.logs(10**7),
    ):
        assert "Old-Pa55word" not in text and "New-Pa55word" not in text


@pytest.mark.parametrize(
    ("computer_name", "fragment"),
    [
        ("ABCDEFGHIJKLMNOP", "15"),  # 16 characters
        ("123456", "all digits"),
        ("WEB_01", "letters, digits and hyphens"),
        ("-WEB", "hyphen"),
    ],
)
def test_invalid_computer_names_are_rejected_by_the_api_server(
    api: Api, namespace: str, computer_name: str, fragment: str
) -> None:
    manifest = windows_vm("bad", namespace, mode="clone", computerName=computer_name)
    code, payload = api.create(manifest, vm_path(namespace))
    assert code == 422, payload
    message = json.dumps(payload)
    assert "computerName" in message and fragment in message, message
    assert api.get(vm_path(namespace, "bad")) is None


def test_a_valid_computer_name_is_accepted(api: Api, namespace: str) -> None:
    code, payload = api.create(
        windows_vm("ok", namespace, mode="clone", computerName="APP-01"), vm_path(namespace)
    )
    assert code == 201, payload
    assert status_of(api, namespace, "ok") == {}  # no operator here: nothing but the API server wrote it
