"""The backup copy pod ``<backup>-copy`` and its NetworkPolicy: one VM's disks streamed to its S3 target.

The pod runs the operator's own image (``uds-vm-operator backup-disks``) with every disk mounted read-only,
hashes each disk while it uploads it, and reports the objects and their sha256 through its termination
message, which the operator turns into the backup's record. It is locked down like the SI-7 verifier
(restricted Pod Security, no service-account token, read-only volumes, limits, a deadline that scales with
the bytes) and fenced by its own policy: no ingress, egress only to cluster DNS and the target's port. The
S3 keys reach it from the user's Secret as environment variables; the operator never reads that Secret.

Both objects are owned by the backup, not by the VM: deleting the backup removes them, and the VM
controller's pruning never sees them. Pure and deterministic like every renderer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.api.backup import BACKUP_API_VERSION, BACKUP_KIND
from uds_vm_operator.api.models import VolumeMode
from uds_vm_operator.apiversions import NETWORKING_API_VERSION
from uds_vm_operator.backup.command import ACCESS_KEY_ENV, SECRET_KEY_ENV
from uds_vm_operator.render.common import ROLE_LABEL, Owner
from uds_vm_operator.render.networkpolicy import DNS_PEER, DNS_PORTS
from uds_vm_operator.render.verifier import (
    ASSUMED_SLOWEST_READ_BYTES_PER_SECOND,
    DEADLINE_FLOOR_SECONDS,
    disk_reader_pod_security_context,
    restricted_container_security_context,
)
from uds_vm_operator.termination import TERMINATION_LOG_PATH

BACKUP_COPY_ROLE = "backup-copy"
BACKUP_LABEL = "uds.dev/backup"
PRUNE_ANNOTATION = "uds.dev/prune-backups"
"""Comma-separated names of the older backups whose objects this pod deletes once its own copy succeeded."""
CDI_ACCESS_KEY = "accessKeyId"
CDI_SECRET_KEY = "secretKey"
COPY_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "250m", "memory": "128Mi", "ephemeral-storage": "1Mi"},
    "limits": {"cpu": "2", "memory": "384Mi", "ephemeral-storage": "16Mi"},
}
PART_MIB = 32
"""Multipart part size: two parts in memory at most stay well inside the memory limit."""


@dataclass(frozen=True)
class BackupOwner(Owner):
    """The UDSVirtualMachineBackup whose copy this is: the pod and its policy are owned by the backup, removed
    with it, and never adopted or pruned by the VM's controller."""

    api_version: ClassVar[str] = BACKUP_API_VERSION
    kind: ClassVar[str] = BACKUP_KIND


@dataclass(frozen=True)
class DiskToCopy:
    """One disk: its claim, how it is attached, and the object key it is written to."""

    name: str
    claim: str
    volume_mode: VolumeMode
    key: str
    size_bytes: int


@dataclass(frozen=True)
class CopyRequest:
    """Everything the copy pod needs."""

    endpoint: str
    bucket: str
    region: str | None
    secret_name: str
    disks: tuple[DiskToCopy, ...]
    image: str
    prune_keys: tuple[str, ...] = ()
    prune_backups: tuple[str, ...] = ()
    image_pull_policy: str = "IfNotPresent"


def copy_pod_name(backup: str) -> str:
    """``<backup>-copy``."""
    return f"{backup}-copy"


def copy_labels(owner: BackupOwner) -> dict[str, str]:
    """What selects the copy pod (its policy, the operator's watch): the backup's name and the role."""
    return {**MANAGED_BY_LABEL, BACKUP_LABEL: owner.name, ROLE_LABEL: BACKUP_COPY_ROLE}


def copy_deadline_seconds(total_bytes: int) -> int:
    """Seconds before Kubernetes stops the copy: a floor plus the bytes at a pessimistic rate."""
    return DEADLINE_FLOOR_SECONDS + -(-total_bytes // ASSUMED_SLOWEST_READ_BYTES_PER_SECOND)


def _metadata(owner: BackupOwner, request: CopyRequest | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": copy_pod_name(owner.name),
        "namespace": owner.namespace,
        "labels": copy_labels(owner),
        "ownerReferences": [owner.reference()],
    }
    if request is not None and request.prune_backups:
        meta["annotations"] = {PRUNE_ANNOTATION: ",".join(request.prune_backups)}
    return meta


def target_port(endpoint: str) -> int:
    """The TCP port of the S3 endpoint (the scheme's default when the URL names none)."""
    parts = urlsplit(endpoint)
    return parts.port or (443 if parts.scheme == "https" else 80)


def render_copy_network_policy(owner: BackupOwner, endpoint: str) -> dict[str, Any]:
    """No ingress; egress to cluster DNS and to the target's port only (S3 endpoints are named, not pods)."""
    return {
        "apiVersion": NETWORKING_API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": _metadata(owner),
        "spec": {
            "podSelector": {"matchLabels": copy_labels(owner)},
            "policyTypes": ["Ingress", "Egress"],
            "egress": [
                {"to": [DNS_PEER], "ports": DNS_PORTS},
                {"ports": [{"protocol": "TCP", "port": target_port(endpoint)}]},
            ],
        },
    }


def _mount_path(index: int) -> str:
    return f"/disk-{index}"


def _disk_path(index: int, disk: DiskToCopy) -> str:
    return f"/dev/uds-disk-{index}" if disk.volume_mode == "Block" else f"{_mount_path(index)}/disk.img"


def copy_command(request: CopyRequest) -> list[str]:
    """``uds-vm-operator backup-disks`` with one ``--disk NAME=PATH=KEY`` per disk."""
    command = [
        "uds-vm-operator",
        "backup-disks",
        "--endpoint",
        request.endpoint,
        "--bucket",
        request.bucket,
        "--part-mib",
        str(PART_MIB),
        "--termination-log",
        TERMINATION_LOG_PATH,
    ]
    if request.region:
        command += ["--region", request.region]
    for index, disk in enumerate(request.disks):
        command += ["--disk", f"{disk.name}={_disk_path(index, disk)}={disk.key}"]
    for key in request.prune_keys:
        command += ["--prune", key]
    return command


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def render_copy_pod(owner: BackupOwner, request: CopyRequest) -> dict[str, Any]:
    """The copy pod: every disk read-only, restricted Pod Security, the S3 keys from the user's Secret."""
    if not request.disks:
        raise ValueError("a backup copies at least one disk")
    container: dict[str, Any] = {
        "name": "backup-disks",
        "image": request.image,
        "imagePullPolicy": request.image_pull_policy,
        "command": copy_command(request),
        "env": [
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            _secret_env(ACCESS_KEY_ENV, request.secret_name, CDI_ACCESS_KEY),
            _secret_env(SECRET_KEY_ENV, request.secret_name, CDI_SECRET_KEY),
        ],
        "resources": {kind: dict(values) for kind, values in COPY_RESOURCES.items()},
        "securityContext": restricted_container_security_context(),
        "terminationMessagePath": TERMINATION_LOG_PATH,
        # A crash before the report (an import error, a usage error) still says why: the log's tail.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    mounts = [
        {"name": f"disk-{i}", "mountPath": _mount_path(i), "readOnly": True}
        for i, disk in enumerate(request.disks)
        if disk.volume_mode != "Block"
    ]
    devices = [
        {"name": f"disk-{i}", "devicePath": _disk_path(i, disk)}
        for i, disk in enumerate(request.disks)
        if disk.volume_mode == "Block"
    ]
    if mounts:
        container["volumeMounts"] = mounts
    if devices:
        container["volumeDevices"] = devices
    total = sum(disk.size_bytes for disk in request.disks)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(owner, request),
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": copy_deadline_seconds(total),
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": disk_reader_pod_security_context(),
            "containers": [container],
            "volumes": [
                {"name": f"disk-{i}", "persistentVolumeClaim": {"claimName": disk.claim, "readOnly": True}}
                for i, disk in enumerate(request.disks)
            ],
        },
    }
