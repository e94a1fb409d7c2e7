"""SI-7 on real volumes: the operator's verifier pod runs the operator's own image on the node, reads a real
disk (ext4 and xfs Filesystem volumes on loop devices, and a raw Block volume), and its verdict drives the VM.

Played here (until the real-CDI tier): CDI's part only — the test writes the disk bytes onto the volume and
creates the PVC CDI would create for the DataVolume (same name, size, mode, class), bound to that volume, then
reports the DataVolume Succeeded. Everything after that is real: scheduling, the kubelet mounting the PVC
read-only (or mapping the block device), the image pulled from the loopback registry, `verify-disk` hashing
the bytes, the termination message the kubelet reports, and the operator's decision.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_harness import OperatorProcess
from tests.node.node_cluster import NodeHandle, running_operator, wait_until
from tools.node import volumes
from uds_vm_operator.api.quantity import parse_bytes

VIRTUAL_SIZE = 64 * 1024 * 1024
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


@pytest.fixture
def restricted_ns(node: NodeHandle) -> Iterator[str]:
    name = node.namespace("si7", RESTRICTED)
    try:
        yield name
    finally:
        node.delete_namespace(name)


@pytest.fixture
def operator(
    node: NodeHandle, operator_image: str, restricted_ns: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The operator as a host process (the chart tier runs it as a pod); its verifier pods run for real."""
    with running_operator(node, restricted_ns, tmp_path / "logs", operator_image) as process:
        yield process


def udsvm(namespace: str, digest: str, volume_mode: str) -> dict[str, Any]:
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "source": {"upload": {"checksum": digest}},
            "disk": {
                "virtualSize": VIRTUAL_SIZE,
                "storageClassName": "udsvm-local",
                "volumeMode": volume_mode,
            },
        },
    }


def play_cdi_upload(node: NodeHandle, namespace: str, disk: bytes, volume_mode: str, filesystem: str) -> None:
    """What CDI's upload would leave: a PVC named after the DataVolume on a real volume holding the disk."""
    dv = wait_until(
        "DataVolume web-dv",
        lambda: node.api.get(f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{namespace}/datavolumes/web-dv"),
    )
    pvc_spec = dv["spec"]["pvc"]
    size = parse_bytes(pvc_spec["resources"]["requests"]["storage"], field="spec.pvc")
    if volume_mode == "Block":
        node.volume(size, "Block", content=disk, claim=(namespace, "web-dv"))
    else:
        room = volumes.filesystem_size_for(len(disk), size, filesystem)  # type: ignore[arg-type]
        volume = node.volume(room, "Filesystem", filesystem, claim=(namespace, "web-dv"))  # type: ignore[arg-type]
        assert volume.mount_point is not None
        target = volume.mount_point / "disk.img"
        with open(target, "wb") as handle:  # CDI leaves disk.img owned by qemu, grown past the image
            handle.write(disk)
            handle.truncate(len(disk) + (1 << 20))  # the image, then space CDI grew it into
        os.chown(target, 107, 107)
        os.chmod(target, 0o660)
    node.create(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "web-dv", "namespace": namespace},
            "spec": {**pvc_spec, "volumeMode": volume_mode},
        },
        f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
    )
    node.api.merge(
        f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{namespace}/datavolumes/web-dv/status",
        {"status": {"phase": "Succeeded", "progress": "100.0%"}},
    )


def status_of(node: NodeHandle, namespace: str) -> dict[str, Any]:
    vm = node.api.get(f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines/web") or {}
    return dict(vm.get("status") or {})


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def watch_verifier_pod(node: NodeHandle, namespace: str) -> dict[str, Any]:
    """The verifier pod once the kubelet reports it terminated (it is deleted soon after the verdict)."""

    def terminated() -> dict[str, Any] | None:
        pod = node.api.get(f"/api/v1/namespaces/{namespace}/pods/web-verify")
        statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
        if statuses and "terminated" in statuses[0].get("state", {}):
            return pod
        return None

    return wait_until("the verifier pod to run and terminate on the node", terminated, 180, 0.2)


@pytest.mark.parametrize(
    ("volume_mode", "filesystem"),
    [("Filesystem", "ext4"), ("Filesystem", "xfs"), ("Block", "")],
    ids=["ext4", "xfs", "block"],
)
def test_a_correct_disk_is_verified_on_the_node_and_the_vm_released(  # noqa: PLR0917 (fixtures)
    node: NodeHandle,
    operator: OperatorProcess,
    operator_image: str,
    restricted_ns: str,
    volume_mode: str,
    filesystem: str,
) -> None:
    disk = os.urandom(VIRTUAL_SIZE)
    digest = "sha256:" + hashlib.sha256(disk).hexdigest()
    node.api.apply(
        udsvm(restricted_ns, digest, volume_mode),
        f"/apis/uds.dev/v1alpha1/namespaces/{restricted_ns}/udsvirtualmachines/web",
    )
    play_cdi_upload(node, restricted_ns, disk, volume_mode, filesystem)
    pod = watch_verifier_pod(node, restricted_ns)
    assert pod["spec"]["nodeName"] == "udsvm-node"
    (container,) = pod["status"]["containerStatuses"]
    assert container["imageID"].split("@")[-1] == operator_image.rsplit("@", maxsplit=1)[-1], (
        "the pod ran the operator's image"
    )
    terminated = container["state"]["terminated"]
    assert terminated["exitCode"] == 0, terminated
    verdict = json.loads(terminated["message"])
    assert verdict["result"] == "match" and verdict["actual"] == digest and verdict["bytes"] == VIRTUAL_SIZE
    status = wait_until(
        "checksumVerified", lambda: (s := status_of(node, restricted_ns)).get("checksumVerified") and s, 90
    )
    assert status["verifiedBy"] == "in-cluster-verifier" and status["verifiedDigest"] == digest
    vm = wait_until(
        "the VM released",
        lambda: (
            (v := node.api.get(f"/apis/kubevirt.io/v1/namespaces/{restricted_ns}/virtualmachines/web"))
            and v["spec"].get("runStrategy") == "Always"
            and v
        ),
        60,
    )
    assert vm["spec"]["runStrategy"] == "Always"


def test_one_flipped_byte_is_caught_on_the_node_and_the_vm_stays_off(
    node: NodeHandle, operator: OperatorProcess, restricted_ns: str
) -> None:
    disk = bytearray(os.urandom(VIRTUAL_SIZE))
    digest = "sha256:" + hashlib.sha256(disk).hexdigest()
    disk[VIRTUAL_SIZE // 2] ^= 0x01
    node.api.apply(
        udsvm(restricted_ns, digest, "Filesystem"),
        f"/apis/uds.dev/v1alpha1/namespaces/{restricted_ns}/udsvirtualmachines/web",
    )
    play_cdi_upload(node, restricted_ns, bytes(disk), "Filesystem", "ext4")
    pod = watch_verifier_pod(node, restricted_ns)
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] != 0 and json.loads(terminated["message"])["result"] == "mismatch"
    status = wait_until(
        "Failed", lambda: (s := status_of(node, restricted_ns)).get("phase") == "Failed" and s, 90
    )
    assert condition(status, "ChecksumVerified")["reason"] == "ChecksumMismatch"
    assert status["checksumVerified"] is False
    vm = node.api.get(f"/apis/kubevirt.io/v1/namespaces/{restricted_ns}/virtualmachines/web") or {}
    assert vm.get("spec", {}).get("runStrategy") == "Halted"
