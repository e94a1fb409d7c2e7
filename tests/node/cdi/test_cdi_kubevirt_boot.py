"""Issue 30 item 6: a disk that came through the real CDI and was verified boots under the real KubeVirt, and
the hardening holds inside the guest.

Two VMs of the project's Debian guest image, each with the declared user `ops` and hostile `userData`:
* `up`: `uds-vmctl prep`, then `uds-vmctl upload` through CDI's real upload proxy; the operator's verifier pod
  checks the landed bytes against prep's sealed digest before the VM is released;
* `web`: CDI's real HTTP import from a server on the node's bridge, CDI itself checking the declared sha256.
Both are booted by virt-launcher under software emulation. From a pod their policy admits, `ops` logs in with
the declared key, while a password login, root's login and the hostile user's password login are refused; from
a pod in another namespace the connection fails. Each boot's times (release -> VMI Running -> guest agent
connected -> first SSH login) are printed and written to .envtest/kubevirt-boot-times.json.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_harness import OperatorProcess
from tests.node.cdi.upload_support import VM as UPLOADED
from tests.node.cdi.upload_support import prep_and_apply, succeeded, upload_ready, vmctl_upload
from tests.node.cdi_support import (
    await_import,
    await_verified,
    bridge_image_server,
    http_udsvm,
    running_operator,
)
from tests.node.kubevirt_guest import (
    GUEST_USER,
    GuestKeys,
    booted_cloud_init,
    build_guest_image,
    make_keys,
    ssh,
    wait_for_login,
)
from tests.node.kubevirt_node import kubevirt_fixture, the_launcher_pod, vmi_path  # noqa: F401 (the session fixture)
from tests.node.node_cluster import NodeHandle, wait_until
from tools.node import probes

NAMESPACE = "cdi-boot"
IMPORTED = "web"
GIB = 1024**3
HOSTILE_USER_DATA = """\
ssh_pwauth: true
disable_root: false
chpasswd: {expire: false, list: ["root:hunter2", "ops:hunter2"]}
users:
  - {name: eve, plain_text_passwd: hunter2, lock_passwd: false, shell: /bin/bash}
"""
SSH_FROM_ADMIN = {
    "allow": [
        {"direction": "Ingress", "podSelector": {"matchLabels": {"app": "admin"}}, "ports": [{"port": 22}]}
    ]
}
TIMES = Path(__file__).resolve().parents[3] / ".envtest" / "kubevirt-boot-times.json"


@pytest.fixture(name="operator")
def operator_fixture(
    cdi: NodeHandle, kubevirt: NodeHandle, operator_image: str, cdi_ns: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The operator as a host process; its verifier pods run the operator's image on the node (shared with
    the backup/restore test)."""
    with running_operator(cdi, cdi_ns, tmp_path / "logs", operator_image) as process:
        yield process


def guest_spec(keys: GuestKeys) -> dict[str, Any]:
    """What both VMs add to their disk: the declared user, hostile user data, SSH only from the admin."""
    return {"cloudInit": booted_cloud_init(keys, userData=HOSTILE_USER_DATA), "network": SSH_FROM_ADMIN}


def condition_true(obj: dict[str, Any] | None, kind: str) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def boot_times(node: NodeHandle, namespace: str, name: str, admin: int, keys: GuestKeys) -> dict[str, Any]:
    """Seconds from the VM's release (runStrategy Always after the digest was verified) to the VMI Running,
    to the guest agent connected, to the first SSH login; returns them with the guest's address."""
    vm_path = f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}"
    wait_until(
        f"{name} released",
        lambda: ((node.api.get(vm_path) or {}).get("spec") or {}).get("runStrategy") == "Always",
        600,
        0.5,
    )
    released = time.monotonic()
    wait_until(
        f"{name}'s VMI Running",
        lambda: (
            ((node.api.get(vmi_path(namespace, name)) or {}).get("status") or {}).get("phase") == "Running"
        ),
        600,
        0.5,
    )
    running = time.monotonic()
    wait_until(
        f"{name}'s guest agent",
        lambda: condition_true(node.api.get(vmi_path(namespace, name)), "AgentConnected"),
        900,
        1,
    )
    agent = time.monotonic()
    ip = the_launcher_pod(node, namespace, name)["status"]["podIP"]
    wait_for_login(admin, ip, keys.ops)
    login = time.monotonic()
    return {
        "ip": ip,
        "release_to_vmi_running_s": round(running - released, 1),
        "release_to_agent_connected_s": round(agent - released, 1),
        "release_to_first_ssh_login_s": round(login - released, 1),
    }


def assert_hardened(admin: int, outsider: int, ip: str, keys: GuestKeys, workdir: Path) -> None:
    """Inside the booted guest: only the declared key of the declared user logs in."""
    assert ssh(admin, ip, GUEST_USER, keys.ops, "id -un").stdout.strip() == GUEST_USER
    refused = {
        "ops by password": ssh(admin, ip, GUEST_USER, None, password="hunter2", workdir=workdir),
        "root by password": ssh(admin, ip, "root", None, password="hunter2", workdir=workdir),
        "root with the declared key": ssh(admin, ip, "root", keys.ops),
        "hostile userData's eve by password": ssh(
            admin, ip, "eve", None, password="hunter2", workdir=workdir
        ),
        "ops with an undeclared key": ssh(admin, ip, GUEST_USER, keys.stranger),
    }
    for attempt, result in refused.items():
        assert result.returncode == 255 and "Permission denied" in result.stderr, (attempt, result)
    assert probes.tcp(admin, ip, 22) == "connected"
    assert probes.tcp_blocked(outsider, ip, 22), "a pod in another namespace reaches the guest's sshd"


@pytest.mark.timeout(1200)  # two Debian boots in sequence under TCG, beside the other lane's: > 600 s loaded
def test_disks_from_the_real_cdi_boot_under_the_real_kubevirt_and_the_hardening_holds(
    cdi: NodeHandle,
    operator: OperatorProcess,
    cdi_ns: str,
    tmp_path: Path,
) -> None:
    node = cdi
    image = build_guest_image()  # raw; CDI converts nothing for it, the verifier hashes its content
    keys = make_keys(tmp_path)
    admin = node.container_pid(node.client_pod(cdi_ns, "admin", {"app": "admin"}))
    other = node.namespace("outsider")
    try:
        outsider = node.container_pid(node.client_pod(other, "outsider", {"app": "outsider"}))

        # `up`: prep, apply, upload through the real proxy; the verifier pod checks the bytes.
        report = prep_and_apply(node, cdi_ns, image, tmp_path / "out")
        node.api.merge(
            f"/apis/uds.dev/v1alpha1/namespaces/{cdi_ns}/udsvirtualmachines/{UPLOADED}",
            {"spec": guest_spec(keys)},
        )
        url, ca = upload_ready(node, cdi_ns, tmp_path)
        done = vmctl_upload(node, cdi_ns, image, url, ca)
        assert done.returncode == 0, done.stderr
        succeeded(node, cdi_ns)
        status = await_verified(node, cdi_ns, UPLOADED, "the verifier's verdict", 600)
        assert status["verifiedBy"] == "in-cluster-verifier" and status["verifiedDigest"] == report["sha256"]

        # `web`: CDI's HTTP import with the declared sha256, checked by CDI itself.
        srv = tmp_path / "srv"
        srv.mkdir()
        served = srv / "debian-12.raw"
        shutil.copyfile(image, served)
        digest = "sha256:" + hashlib.sha256(served.read_bytes()).hexdigest()
        body = http_udsvm(cdi_ns, IMPORTED, "", digest, image.stat().st_size)
        with bridge_image_server(srv) as (base, _requests):
            body["spec"]["source"]["http"]["url"] = f"{base}/{served.name}"
            body["spec"].update(guest_spec(keys))
            node.api.apply(body, f"/apis/uds.dev/v1alpha1/namespaces/{cdi_ns}/udsvirtualmachines/{IMPORTED}")
            _, dv = await_import(node, cdi_ns, f"{IMPORTED}-dv", timeout_s=900)
        assert dv["status"]["phase"] == "Succeeded", dv["status"]

        times = {name: boot_times(node, cdi_ns, name, admin, keys) for name in (UPLOADED, IMPORTED)}
        print(f"KubeVirt boot times: {json.dumps(times)}")
        TIMES.parent.mkdir(parents=True, exist_ok=True)
        TIMES.write_text(json.dumps(times, indent=1) + "\n", encoding="utf-8")
        for name, measured in times.items():
            assert_hardened(admin, outsider, measured["ip"], keys, tmp_path)
            ready = wait_until(
                f"{name} Ready",
                lambda n=name: condition_true(
                    node.api.get(f"/apis/uds.dev/v1alpha1/namespaces/{cdi_ns}/udsvirtualmachines/{n}"),
                    "Ready",
                ),
                120,
            )
            assert ready
    finally:
        node.delete_namespace(other)
