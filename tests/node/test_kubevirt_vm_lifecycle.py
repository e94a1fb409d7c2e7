"""What a UDSVirtualMachine becomes under the whole real KubeVirt v1.8.4 (issues 16 and 30).

The operator runs as a host process; KubeVirt is real end to end: virt-controller writes the VM's status and
makes the VMI and the virt-launcher pod, virt-handler starts the domain in it and reports the VMI Running,
libvirt runs QEMU under software emulation and the guest boots; virt-api serves the restart subresource.
Played: only CDI (the test puts the tiny test guest's disk on a real node volume as CDI's import would leave
it, and reports the DataVolume Succeeded; CDI verified the declared sha256 on the way, so the operator
releases the VM without its own verifier pod). Power is KubeVirt's mechanics, not the guest's contents, so the
guest that boots in seconds serves (tests/guest/test_tiny_guest.py proves what it does). Real CDI with our
verifier is booted in tests/node/cdi.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_harness import OperatorProcess
from tests.node.kubevirt_guest import (  # noqa: F401 (shared fixtures)
    TINY_GUEST_DISK,
    GuestKeys,
    boot_id,
    booted_cloud_init,
    keys_fixture,
    tiny_guest_image_fixture,
    wait_for_login,
)
from tests.node.kubevirt_node import (  # noqa: F401 (kubevirt_fixture: the session fixture)
    component_logs,
    isolation,
    kubevirt_fixture,
    launcher_pods,
    play_cdi_import,
    the_launcher_pod,
    udsvm,
    vm_path,
    vmi_path,
    waited,
)
from tests.node.node_cluster import NodeHandle, running_operator, wait_until

UDS_VM_API = "/apis/uds.dev/v1alpha1"


SSH_FROM_ADMIN = {
    "allow": [
        {"direction": "Ingress", "podSelector": {"matchLabels": {"app": "admin"}}, "ports": [{"port": 22}]}
    ]
}


@pytest.fixture
def operator(kubevirt: NodeHandle, ns: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    with running_operator(kubevirt, ns, tmp_path / "logs") as process:
        yield process


def stopped_by_virt_controller(node: NodeHandle, namespace: str, *expected: str) -> None:
    """virt-controller has seen the VM (it writes the printable status); its log in the failure message.
    A Halted VM whose DataVolume still imports is `Provisioning` to KubeVirt (measured), else `Stopped`."""
    wanted = expected or ("Stopped",)
    try:
        wait_until(
            "virt-controller to report the VM Stopped",
            lambda: printable_status(node, namespace, "web") in wanted,
            120,
        )
    except AssertionError as error:
        vm = node.api.get(vm_path(namespace, "web"))
        raise AssertionError(f"{error}\nVM: {vm}\n{component_logs(node)}") from None


def printable_status(node: NodeHandle, namespace: str, name: str) -> str | None:
    vm = node.api.get(vm_path(namespace, name)) or {}
    return (vm.get("status") or {}).get("printableStatus")


def vmctl(node: NodeHandle, *args: str) -> str:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "uds-vmctl"), *args, "--kubeconfig", str(node.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_vm_is_halted_until_verified_then_becomes_a_vmi_and_a_launcher_pod(
    kubevirt: NodeHandle,
    operator: OperatorProcess,
    ns: str,
) -> None:
    node = kubevirt
    node.api.create(udsvm(ns), f"{UDS_VM_API}/namespaces/{ns}/udsvirtualmachines")
    vm = wait_until("the operator's KubeVirt VM", lambda: node.api.get(vm_path(ns, "web")))
    assert vm["spec"]["runStrategy"] == "Halted"  # the declared digest is not verified yet
    # virt-controller has seen the VM (it writes its printable status) and made nothing of it.
    stopped_by_virt_controller(node, ns, "Provisioning", "Stopped")
    assert node.api.get(vmi_path(ns, "web")) is None
    assert launcher_pods(node, ns, "web") == []

    play_cdi_import(node, ns, "web-dv")  # a volume without disk.img: KubeVirt makes an empty disk
    wait_until(
        "the operator to release the verified VM",
        lambda: (node.api.get(vm_path(ns, "web")) or {}).get("spec", {}).get("runStrategy") == "Always",
        120,
    )
    vmi = waited(node, ns, "virt-controller's VMI", lambda: node.api.get(vmi_path(ns, "web")))
    assert vmi["metadata"]["ownerReferences"][0]["kind"] == "VirtualMachine"
    pod = the_launcher_pod(node, ns, "web")
    volumes = pod["spec"]["volumes"]
    claims = {v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v}
    secrets = {v["secret"]["secretName"] for v in volumes if "secret" in v}
    assert "web-dv" in claims, volumes  # the verified disk
    assert "web-cloudinit" in secrets, volumes  # the cloud-init user data, from its Secret, never inline
    labels = pod["metadata"]["labels"]
    assert labels["uds.dev/vm"] == "web"  # our template labels reach the real launcher pod

    # The VM's NetworkPolicy selects the real launcher pod: the API server's own label selection.
    assert policy_selection(node, ns) == [pod["metadata"]["name"]]
    assert isolation(node, ns) == ("True", "NetworkPolicyApplied", True)

    # Another field manager narrows the live policy's selector (server-side apply keeps the extra label,
    # every rendered field is still in place): the API server now selects no pod, and the operator must
    # report that the policy isolates nothing, never zero trust.
    node.api.merge(netpol(ns), {"spec": {"podSelector": {"matchLabels": {"owner-team": "a"}}}})
    assert policy_selection(node, ns) == []
    wait_until(
        "the operator to report a policy that selects no pod",
        lambda: isolation(node, ns) == ("False", "NetworkPolicySelectsNoPod", False),
        120,
    )
    node.api.merge(netpol(ns), {"spec": {"podSelector": {"matchLabels": {"owner-team": None}}}})
    assert policy_selection(node, ns) == [pod["metadata"]["name"]]
    wait_until(
        "the operator to report the policy applied again",
        lambda: isolation(node, ns) == ("True", "NetworkPolicyApplied", True),
        120,
    )
    assert_a_broken_boot_is_never_ready(node, ns)


def udsvm_ready(node: NodeHandle, namespace: str, name: str = "web") -> tuple[str, str]:
    """(status, reason) of the UDSVirtualMachine's Ready condition."""
    body = node.api.get(f"{UDS_VM_API}/namespaces/{namespace}/udsvirtualmachines/{name}") or {}
    found = next((c for c in (body.get("status") or {}).get("conditions", []) if c["type"] == "Ready"), {})
    return found.get("status", ""), found.get("reason", "")


def assert_a_broken_boot_is_never_ready(node: NodeHandle, namespace: str) -> None:
    """The disk holds nothing bootable: virt-handler really runs the domain (VMI Running), but no guest agent
    ever answers KubeVirt's guestAgentPing probe, so neither KubeVirt nor the operator calls the VM Ready."""
    waited(
        node,
        namespace,
        "virt-handler to report the VMI Running",
        lambda: (
            ((node.api.get(vmi_path(namespace, "web")) or {}).get("status") or {}).get("phase") == "Running"
        ),
        300,
    )
    deadline = time.monotonic() + 60  # twelve probe periods after the domain runs
    while time.monotonic() < deadline:
        vm_status = (node.api.get(vm_path(namespace, "web")) or {}).get("status") or {}
        assert vm_status.get("ready") is not True, vm_status
        assert udsvm_ready(node, namespace)[0] == "False"
        time.sleep(3)
    vmi = node.api.get(vmi_path(namespace, "web")) or {}
    conditions = {c["type"]: c["status"] for c in (vmi.get("status") or {}).get("conditions") or []}
    assert conditions.get("Ready") == "False" and "AgentConnected" not in conditions, conditions


def netpol(namespace: str) -> str:
    """The VM's rendered NetworkPolicy."""
    return f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/web-netpol"


def label_selector(selector: dict[str, Any]) -> str:
    """A NetworkPolicy podSelector as the API server's labelSelector query (set-based syntax)."""
    terms = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        terms.append(
            {
                "In": f"{key} in ({','.join(values)})",
                "NotIn": f"{key} notin ({','.join(values)})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }[operator]
        )
    return ",".join(terms)


def policy_selection(node: NodeHandle, namespace: str) -> list[str]:
    """The pods of the namespace the live web-netpol selects, as the API server selects them."""
    policy = node.api.get(netpol(namespace))
    assert policy is not None
    selector = label_selector(policy["spec"]["podSelector"])
    return sorted(
        p["metadata"]["name"]
        for p in node.api.items(f"/api/v1/namespaces/{namespace}/pods", label_selector=selector)
    )


def running_vmi_uid(node: NodeHandle, namespace: str) -> str | None:
    """The UID of the VM's VMI once virt-handler reports it Running (and it is not being deleted)."""
    vmi = node.api.get(vmi_path(namespace, "web"))
    if vmi is None or "deletionTimestamp" in vmi["metadata"]:
        return None
    return str(vmi["metadata"]["uid"]) if (vmi.get("status") or {}).get("phase") == "Running" else None


def guest_boot(
    node: NodeHandle, namespace: str, admin_pid: int, keys: GuestKeys, after: set[str]
) -> tuple[str, str]:
    """Wait for a VMI not in `after` to run and its guest to take an SSH login; return (VMI UID, boot id)."""
    uid = waited(
        node,
        namespace,
        "a new VMI Running",
        lambda: (u := running_vmi_uid(node, namespace)) not in (None, *after) and u,
        300,
    )
    pod = node.wait_running(namespace, the_launcher_pod(node, namespace, "web")["metadata"]["name"], 900)
    ip = pod["status"]["podIP"]
    wait_for_login(admin_pid, ip, keys.ops)
    assert udsvm_ready(node, namespace) == ("True", "VirtualMachineRunning")
    return str(uid), boot_id(admin_pid, ip, keys.ops)


def test_power_restart_stop_start_through_the_real_kubevirt(
    kubevirt: NodeHandle,
    operator: OperatorProcess,
    ns: str,
    tiny_guest_image: Path,
    keys: GuestKeys,
) -> None:
    """restart, stop and start as a user gives them, acted on by the real virt-api, virt-controller and
    virt-handler: each start is a new boot of the guest, seen from inside it (a new kernel boot id)."""
    node = kubevirt
    admin = node.container_pid(node.client_pod(ns, "admin", {"app": "admin"}))
    spec = {"disk": TINY_GUEST_DISK, "network": SSH_FROM_ADMIN, "cloudInit": booted_cloud_init(keys)}
    node.api.create(udsvm(ns, **spec), f"{UDS_VM_API}/namespaces/{ns}/udsvirtualmachines")
    play_cdi_import(node, ns, "web-dv", tiny_guest_image)
    first, first_boot = guest_boot(node, ns, admin, keys, set())
    vm_uid = node.api.get(vm_path(ns, "web"))["metadata"]["uid"]  # type: ignore[index]

    # restart: virt-api's restart subresource (through the aggregated API), not a delete of the VM: KubeVirt
    # stops the VMI and makes a new one, and the guest boots again.
    out = vmctl(node, "power", "restart", "web", "-n", ns)
    assert "restart requested" in out
    second, second_boot = guest_boot(node, ns, admin, keys, {first})
    assert node.api.get(vm_path(ns, "web"))["metadata"]["uid"] == vm_uid  # type: ignore[index]
    assert [p["metadata"]["ownerReferences"][0]["uid"] for p in launcher_pods(node, ns, "web")] == [second]

    # stop: the UDSVirtualMachine's runStrategy, carried by the operator to KubeVirt, acted on by KubeVirt:
    # the VMI and its launcher pod go, the VM stays.
    vmctl(node, "power", "stop", "web", "-n", ns)
    wait_until(
        "the operator to halt the KubeVirt VM",
        lambda: (node.api.get(vm_path(ns, "web")) or {}).get("spec", {}).get("runStrategy") == "Halted",
        120,
    )
    waited(
        node,
        ns,
        "KubeVirt to stop the VMI and its pod",
        lambda: node.api.get(vmi_path(ns, "web")) is None and not launcher_pods(node, ns, "web"),
        300,
    )
    waited(
        node,
        ns,
        "virt-controller to report the VM Stopped",
        lambda: printable_status(node, ns, "web") == "Stopped",
    )
    wait_until(
        "the operator to report the VM stopped", lambda: udsvm_ready(node, ns) == ("False", "Stopped"), 120
    )

    vmctl(node, "power", "start", "web", "-n", ns)
    _, third_boot = guest_boot(node, ns, admin, keys, {first, second})
    assert node.api.get(vm_path(ns, "web"))["metadata"]["uid"] == vm_uid  # type: ignore[index]
    assert len({first_boot, second_boot, third_boot}) == 3, (first_boot, second_boot, third_boot)
