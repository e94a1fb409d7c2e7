"""The whole KubeVirt v1.8.4 on the node: virt-api, virt-controller, virt-handler and virt-launcher.

Installed once per session by tools/kubevirt (images pushed into the node's registry, then virt-operator's
install strategy applied; ADR 0008, ADR 0015). Admission answers come from virt-api, VMIs and virt-launcher
pods from virt-controller; virt-handler labels the node, registers its device plugins and starts each VMI's
domain in its launcher pod, where libvirt runs QEMU under software emulation (the KubeVirt CR enables it
explicitly) and the guest really boots. Nothing of KubeVirt is played here.

Played, for tests whose subject is KubeVirt and not CDI: CDI's import (`play_cdi_import`), which puts the
project's Debian guest image where CDI would (disk.img on the claim's volume). The real-CDI tier
(tests/node/cdi) boots a disk that real CDI imported and our verifier checked.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.node import lanes
from tests.node.node_cluster import NodeHandle, wait_until
from tools.envtest.pinned_versions import pinned_versions
from tools.kubevirt import kubevirt_install
from tools.node import volumes
from uds_vm_operator.api.quantity import parse_bytes

ROOT = Path(__file__).resolve().parents[2]
VM_API = "/apis/kubevirt.io/v1"
DV_API = "/apis/cdi.kubevirt.io/v1beta1"
SHA = "sha256:" + "a" * 64


@pytest.fixture(scope="session", name="kubevirt")
def kubevirt_fixture(node: NodeHandle) -> NodeHandle:
    """The node with virt-api and virt-controller running and their webhooks registered (under `make test`'s
    two lanes the first lane's node fixture has installed it: tests/node/lanes.py)."""
    if lanes.lane() is None:
        install_kubevirt(node)
    return node


def install_kubevirt(node: NodeHandle) -> None:
    """KubeVirt's images pushed into the node's registry and the whole KubeVirt applied and up."""
    images = subprocess.run(
        [str(ROOT / "tools" / "kubevirt" / "images.sh"), str(node.state_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    if images.returncode != 0:
        pytest.fail(f"KubeVirt's images could not be built or pushed: {images.stderr[-2000:]}", pytrace=False)
    try:
        timings = kubevirt_install.up(node.state_dir, pinned_versions().kubevirt)
    except kubevirt_install.InstallError as error:
        pytest.fail(f"KubeVirt could not be installed on the node: {error}", pytrace=False)
    print(f"KubeVirt up: {timings}")


BLANK_DISK_BYTES = 64 * 1024 * 1024
"""udsvm_spec's virtual size: the blank disk.img a volume without an image holds."""


def udsvm_spec(url: str = "https://images.example/web.qcow2") -> dict[str, Any]:
    """A VM from an HTTP image with a declared digest (CDI verifies it on import; played here)."""
    return {
        "source": {"http": {"url": url, "checksum": SHA}},
        "disk": {"virtualSize": BLANK_DISK_BYTES, "storageClassName": "udsvm-local"},
        "cloudInit": {"sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEx4mpl3 k@host"]},
    }


def udsvm(namespace: str, name: str = "web", **spec: Any) -> dict[str, Any]:
    """A UDSVirtualMachine of `udsvm_spec`, with `spec` fields added (e.g. network)."""
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {**udsvm_spec(), **spec},
    }


def play_cdi_import(node: NodeHandle, namespace: str, dv_name: str, image: Path | None = None) -> None:
    """What CDI's HTTP import leaves: the PVC named after the DataVolume and owned by it, bound to a real
    node volume holding ``image`` (a raw disk) as disk.img owned by the qemu user, and the DataVolume
    Succeeded (CDI checked the declared sha256 on the way). Without ``image`` disk.img is a blank raw disk of
    the declared virtual size (what CDI leaves for a blank source): the guest finds nothing to boot."""
    dv = wait_until(
        f"DataVolume {dv_name}",
        lambda: node.api.get(f"{DV_API}/namespaces/{namespace}/datavolumes/{dv_name}"),
    )
    storage = dv["spec"].get("storage") or dv["spec"].get("pvc") or {}
    size = parse_bytes(storage["resources"]["requests"]["storage"], field="storage")
    content = image.stat().st_size if image is not None else 0
    volume = node.volume(
        volumes.filesystem_size_for(content, size), "Filesystem", "ext4", claim=(namespace, dv_name)
    )
    assert volume.mount_point is not None
    target = volume.mount_point / "disk.img"
    if image is not None:
        subprocess.run(["cp", "--sparse=always", str(image), str(target)], check=True, timeout=300)
    else:
        with target.open("wb") as blank:
            blank.truncate(BLANK_DISK_BYTES)
    os.chown(target, 107, 107)
    owner = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "name": dv_name,
        "uid": dv["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    node.api.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": dv_name, "namespace": namespace, "ownerReferences": [owner]},
            "spec": {
                "accessModes": storage.get("accessModes") or ["ReadWriteOnce"],
                "resources": {"requests": {"storage": str(size)}},
                "storageClassName": "udsvm-local",
                "volumeMode": "Filesystem",
            },
        },
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
    )
    node.api.merge(
        f"{DV_API}/namespaces/{namespace}/datavolumes/{dv_name}/status",
        {"status": {"phase": "Succeeded", "progress": "100.0%"}},
    )


def vm_path(namespace: str, name: str | None = None) -> str:
    """The VirtualMachine collection (or one VM) in a namespace."""
    base = f"{VM_API}/namespaces/{namespace}/virtualmachines"
    return f"{base}/{name}" if name else base


def vmi_path(namespace: str, name: str) -> str:
    """One VirtualMachineInstance."""
    return f"{VM_API}/namespaces/{namespace}/virtualmachineinstances/{name}"


def launcher_pods(node: NodeHandle, namespace: str, vm_name: str) -> list[dict[str, Any]]:
    """The virt-launcher pods virt-controller made for a VM, selected by KubeVirt's own labels."""
    return node.api.items(
        f"/api/v1/namespaces/{namespace}/pods",
        label_selector=f"kubevirt.io=virt-launcher,vm.kubevirt.io/name={vm_name}",
    )


def dry_run_create(node: NodeHandle, namespace: str, vm: dict[str, Any]) -> tuple[int, Any]:
    """POST a VirtualMachine with dryRun=All: the API server runs the schema and every admission webhook
    (virt-api's are declared sideEffects: None) and stores nothing."""
    body = {**vm, "metadata": {**vm["metadata"], "namespace": namespace}}
    body["metadata"].pop("ownerReferences", None)  # the owning UDSVirtualMachine does not exist here
    return node.api.call(
        "POST",
        vm_path(namespace),
        body,
        params={"dryRun": "All", "fieldValidation": "Strict"},
        expect=(200, 201, 400, 403, 422),
    )


def component_logs(node: NodeHandle, component: str = "virt-controller", lines: int = 40) -> str:
    """The last log lines of a KubeVirt component's pods, for a failing test's message."""
    out = []
    for pod in node.api.items("/api/v1/namespaces/kubevirt/pods", label_selector=f"kubevirt.io={component}"):
        name = pod["metadata"]["name"]
        try:
            text = node.api.text(f"/api/v1/namespaces/kubevirt/pods/{name}/log?tailLines={lines}")
        except Exception as error:  # diagnostics only: never mask the real failure
            text = f"(no log: {error})"
        out.append(f"--- {name} ({pod['status'].get('phase')}) ---\n{text}")
    return "\n".join(out)


def diagnosis(node: NodeHandle, namespace: str) -> str:
    """KubeVirt's view of the namespace's VMs: their status, the events, virt-controller's log."""
    vms = [
        {
            "name": vm["metadata"]["name"],
            "spec.runStrategy": vm["spec"].get("runStrategy"),
            "status": vm.get("status"),
        }
        for vm in node.api.items(vm_path(namespace))
    ]
    events = [
        f"{e.get('involvedObject', {}).get('kind')}/{e.get('involvedObject', {}).get('name')}: "
        f"{e.get('reason')}: {e.get('message')}"
        for e in node.api.items(f"/api/v1/namespaces/{namespace}/events")
    ]
    return f"VMs: {vms}\nevents:\n" + "\n".join(events) + f"\n{component_logs(node, lines=60)}"


def waited(node: NodeHandle, namespace: str, what: str, probe: Any, timeout_s: float = 180.0) -> Any:
    """wait_until, with KubeVirt's view of the namespace in the failure message."""
    try:
        return wait_until(what, probe, timeout_s)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{diagnosis(node, namespace)}") from None


def the_launcher_pod(node: NodeHandle, namespace: str, name: str) -> dict[str, Any]:
    """The one virt-launcher pod of a VM, once virt-controller made it."""
    pods = waited(
        node, namespace, "virt-controller's virt-launcher pod", lambda: launcher_pods(node, namespace, name)
    )
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def isolation(node: NodeHandle, namespace: str, name: str = "web") -> tuple[str, str, bool]:
    """(NetworkIsolated status, its reason, zeroTrust) from the UDSVirtualMachine's status."""
    path = f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines/{name}"
    status = (node.api.get(path) or {}).get("status") or {}
    found = next((c for c in status.get("conditions", []) if c["type"] == "NetworkIsolated"), {})
    return (found.get("status", ""), found.get("reason", ""), bool(status.get("zeroTrust")))
