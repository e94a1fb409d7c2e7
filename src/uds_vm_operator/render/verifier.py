"""The SI-7 verifier: pod ``<name>-verify`` and its deny-all NetworkPolicy ``<name>-verify-deny``.

CDI checks no digest on uploads (its issue #4104) and none on http before v1.65, so after the import and
before the VM may run, the operator hashes the bytes that landed in the PVC itself: a short-lived pod runs
the operator's own image (``uds-vm-operator verify-disk``) with the PVC mounted read-only and reports the
verdict through its termination message.

The pod is as locked down as Kubernetes allows, because it handles untrusted data next to evidence:
restricted Pod Security (non-root 65532, read-only root filesystem, no capabilities, RuntimeDefault
seccomp, no privilege escalation), no service-account token, no network (the NetworkPolicy denies all
ingress and egress; it is applied before the pod), CPU/memory limits (a site may set others:
:mod:`render.verifier_resources`) and a deadline that scales with the disk size. The annotations record
what the verdict is about (disk UID, expected digest, virtual size), so a stale verdict is never applied to a
different disk or a changed declaration.

Pure and deterministic, like every renderer: the controller applies the NetworkPolicy first, then the pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from uds_vm_operator.apiversions import NETWORKING_API_VERSION
from uds_vm_operator.render.common import ROLE_LABEL, Owner, child_metadata
from uds_vm_operator.render.verifier_resources import Resources, default_resources
from uds_vm_operator.termination import TERMINATION_LOG_PATH

VERIFIER_ROLE = "verifier"
VERIFIER_USER = 65532
QEMU_GROUP = 107
"""KubeVirt and CDI write disk images as the qemu user/group (107); group read access is all we need."""

FILESYSTEM_MOUNT_PATH = "/disk"
FILESYSTEM_DISK_PATH = "/disk/disk.img"
BLOCK_DEVICE_PATH = "/dev/uds-disk"

EXPECTED_DIGEST_ANNOTATION = "uds.dev/expected-digest"
VIRTUAL_SIZE_ANNOTATION = "uds.dev/virtual-size"
DISK_UID_ANNOTATION = "uds.dev/disk-uid"

DEADLINE_FLOOR_SECONDS = 600
ASSUMED_SLOWEST_READ_BYTES_PER_SECOND = 20 << 20
"""A pessimistic read rate (network storage under load) so a large, healthy disk is never cut off."""

VolumeMode = Literal["Filesystem", "Block"]


@dataclass(frozen=True)
class VerifierRequest:
    """Everything the verifier pod needs: which disk, what to expect, which image to run.

    ``disk_uid`` is the UID of the DataVolume whose PVC is checked: the verdict belongs to that disk, and a
    re-created disk (same name, new UID) must be verified again.
    """

    pvc_name: str
    volume_mode: VolumeMode
    virtual_size_bytes: int
    expected_digest: str
    disk_uid: str
    image: str
    image_pull_policy: str = "IfNotPresent"
    resources: Resources | None = None
    """The pod's requests and limits (:mod:`render.verifier_resources`); None: the defaults."""


def verifier_pod_name(vm_name: str) -> str:
    """``<name>-verify``: the verifier pod of one UDSVirtualMachine."""
    return f"{vm_name}-verify"


def verifier_network_policy_name(vm_name: str) -> str:
    """``<name>-verify-deny``: the NetworkPolicy that cuts the verifier pod off the network."""
    return f"{vm_name}-verify-deny"


def verifier_labels() -> dict[str, str]:
    """The role label that tells the verifier pod apart from the VM's own pods (both carry ``uds.dev/vm``)."""
    return {ROLE_LABEL: VERIFIER_ROLE}


def verifier_deadline_seconds(virtual_size_bytes: int) -> int:
    """Seconds before Kubernetes kills the pod: a floor plus the time to read the disk at a slow rate."""
    read_seconds = -(-virtual_size_bytes // ASSUMED_SLOWEST_READ_BYTES_PER_SECOND)
    return DEADLINE_FLOOR_SECONDS + read_seconds


def verifier_annotations(request: VerifierRequest) -> dict[str, str]:
    """What the verdict of this pod is about; the controller compares these before trusting the verdict."""
    return {
        DISK_UID_ANNOTATION: request.disk_uid,
        EXPECTED_DIGEST_ANNOTATION: request.expected_digest,
        VIRTUAL_SIZE_ANNOTATION: str(request.virtual_size_bytes),
    }


def render_verifier(owner: Owner, request: VerifierRequest) -> list[dict[str, Any]]:
    """Both verifier objects in apply order: the NetworkPolicy first, so the pod never runs unfenced."""
    return [render_verifier_network_policy(owner), render_verifier_pod(owner, request)]


def render_verifier_network_policy(owner: Owner) -> dict[str, Any]:
    """Deny all ingress and egress for the verifier pod: hashing a local volume needs no network."""
    return {
        "apiVersion": NETWORKING_API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": child_metadata(owner, verifier_network_policy_name(owner.name), labels=verifier_labels()),
        "spec": {
            "podSelector": {"matchLabels": {"uds.dev/vm": owner.name, **verifier_labels()}},
            "policyTypes": ["Ingress", "Egress"],
        },
    }


def _verify_command(request: VerifierRequest, disk_path: str) -> list[str]:
    return [
        "uds-vm-operator",
        "verify-disk",
        "--path",
        disk_path,
        "--virtual-size",
        str(request.virtual_size_bytes),
        "--expected",
        request.expected_digest,
        "--termination-log",
        TERMINATION_LOG_PATH,
    ]


def restricted_container_security_context() -> dict[str, Any]:
    """Restricted PSS for the container: non-root, read-only root, no capabilities or escalation (the verifier
    and the backup copy pod alike)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": VERIFIER_USER,
        "runAsGroup": VERIFIER_USER,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _verifier_container(request: VerifierRequest) -> dict[str, Any]:
    """The ``verify-disk`` container with the disk attached read-only: a device for Block, else a mount."""
    block = request.volume_mode == "Block"
    container: dict[str, Any] = {
        "name": "verify-disk",
        "image": request.image,
        "imagePullPolicy": request.image_pull_policy,
        "command": _verify_command(request, BLOCK_DEVICE_PATH if block else FILESYSTEM_DISK_PATH),
        "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "resources": (
            {kind: dict(values) for kind, values in request.resources.items()}
            if request.resources is not None
            else default_resources()
        ),
        "securityContext": restricted_container_security_context(),
        "terminationMessagePath": TERMINATION_LOG_PATH,
        "terminationMessagePolicy": "File",
    }
    if block:
        container["volumeDevices"] = [{"name": "disk", "devicePath": BLOCK_DEVICE_PATH}]
    else:
        container["volumeMounts"] = [{"name": "disk", "mountPath": FILESYSTEM_MOUNT_PATH, "readOnly": True}]
    return container


def disk_reader_pod_security_context() -> dict[str, Any]:
    """Restricted PSS for a pod that only reads disks CDI and KubeVirt wrote (group qemu, no fsGroup)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": VERIFIER_USER,
        "runAsGroup": VERIFIER_USER,
        # Read access to disk.img written by CDI as qemu (107). No fsGroup: with a read-only volume
        # nothing may be chowned, and the disk is evidence.
        "supplementalGroups": [QEMU_GROUP],
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def render_verifier_pod(owner: Owner, request: VerifierRequest) -> dict[str, Any]:
    """The verifier pod: one container running ``verify-disk`` on the read-only PVC, restricted PSS."""
    if request.virtual_size_bytes <= 0:
        raise ValueError(f"virtual size must be positive, got {request.virtual_size_bytes}")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": child_metadata(
            owner,
            verifier_pod_name(owner.name),
            labels=verifier_labels(),
            annotations=verifier_annotations(request),
        ),
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": verifier_deadline_seconds(request.virtual_size_bytes),
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": disk_reader_pod_security_context(),
            "containers": [_verifier_container(request)],
            "volumes": [
                {"name": "disk", "persistentVolumeClaim": {"claimName": request.pvc_name, "readOnly": True}}
            ],
        },
    }
