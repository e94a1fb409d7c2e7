"""The UDSVirtualMachineBackup API (``uds.dev/v1alpha1``): one backup of one VM's disks, and its record.

A backup is asked for by ``uds-vmctl backup`` or by the VM's ``spec.backup.schedule``; the operator copies
the disks to the VM's S3 target and records, per disk, the object and the sha256 of its bytes. The record
lives here, in the cluster, apart from the bucket: whoever can alter the stored bytes cannot alter what a
restore is checked against (a restore is held until the SI-7 verifier has hashed the restored disk against
this record). A backup is not owned by its VM: it must outlive the VM it can bring back.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from uds_vm_operator.api.models import (
    API_GROUP,
    API_VERSION,
    ApiModel,
    BackupTarget,
    Checksum,
    DnsLabel,
)

BACKUP_KIND = "UDSVirtualMachineBackup"
BACKUP_PLURAL = "udsvirtualmachinebackups"
BACKUP_SINGULAR = "udsvirtualmachinebackup"
BACKUP_SHORT_NAMES = ("udsvmbackup",)
BACKUP_API_VERSION = f"{API_GROUP}/{API_VERSION}"
BACKUP_VM_LABEL = "uds.dev/vm"
"""Every backup names its VM in this label, so a VM's backups are one label selector away."""
REQUESTED_BY_ANNOTATION = "uds.dev/requested-by"
"""``schedule`` or ``uds-vmctl``: who asked for the backup."""
RESTORED_FROM_ANNOTATION = "uds.dev/restored-from"
"""On a VM made by ``uds-vmctl restore``: the backup its root disk came from (CP-10 evidence)."""
MAX_BACKUP_NAME_LENGTH = 52
"""``<backup>-copy`` (the copy pod) and its policy ``<backup>-copy-policy`` stay within 63 characters."""

BackupPhase = Literal["Pending", "Running", "Succeeded", "Failed"]
FINISHED_PHASES = ("Succeeded", "Failed")
"""A backup in one of these phases is never run again (ask for a new one)."""
Consistency = Literal["frozen", "crash", "stopped"]
"""How the bytes were taken: the guest's filesystems frozen through its agent (application-consistent), a
running guest that could not be frozen (crash-consistent, as after a power cut), or a stopped VM."""

BACKUP_NAME_VALIDATIONS = (
    {
        "rule": f"size(self.metadata.name) <= {MAX_BACKUP_NAME_LENGTH}",
        "message": f"a backup's name is at most {MAX_BACKUP_NAME_LENGTH} characters (its pod is <name>-copy)",
    },
)


class UDSVirtualMachineBackupSpec(ApiModel):
    """Which VM to back up (in the backup's namespace); the target is the VM's ``spec.backup.target``."""

    vm_name: DnsLabel = Field(description="The UDSVirtualMachine whose disks are copied.")


class BackedUpDisk(ApiModel):
    """One disk of the backup: where its bytes are and what they hash to."""

    name: Annotated[str, Field(max_length=63)] = Field(description="root, or the data disk's name.")
    object: Annotated[str, Field(max_length=2048)] = Field(description="The object's URL (path-style S3).")
    sha256: Checksum = Field(description="sha256 of the disk's bytes, computed while they were copied.")
    bytes: Annotated[int, Field(ge=0)]


class UDSVirtualMachineBackupStatus(ApiModel):
    """The backup's progress and, once Succeeded, its record (written by the operator only)."""

    phase: BackupPhase | None = None
    consistency: Consistency | None = None
    message: Annotated[str, Field(max_length=4096)] | None = None
    started_at: Annotated[str, Field(max_length=64)] | None = Field(
        default=None, json_schema_extra={"format": "date-time"}
    )
    completed_at: Annotated[str, Field(max_length=64)] | None = Field(
        default=None, json_schema_extra={"format": "date-time"}
    )
    duration_seconds: float | None = None
    bytes: Annotated[int, Field(ge=0)] | None = None
    target: BackupTarget | None = None
    disks: Annotated[list[BackedUpDisk], Field(max_length=17)] = Field(default_factory=list)
    vm_uid: Annotated[str, Field(max_length=64)] | None = None
    vm_spec: dict[str, Any] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True, "type": "object"},
        description="The VM's spec when it was backed up: what `uds-vmctl restore` declares again.",
    )


BACKUP_PRINTER_COLUMNS: tuple[dict[str, str], ...] = (
    {"name": "VM", "type": "string", "json_path": ".spec.vmName", "description": "The VM backed up"},
    {"name": "PHASE", "type": "string", "json_path": ".status.phase", "description": "Backup phase"},
    {
        "name": "CONSISTENCY",
        "type": "string",
        "json_path": ".status.consistency",
        "description": "frozen (guest agent), crash, or stopped",
    },
    {"name": "BYTES", "type": "integer", "json_path": ".status.bytes", "description": "Bytes copied"},
    {
        "name": "COMPLETED",
        "type": "date",
        "json_path": ".status.completedAt",
        "description": "When the copy finished",
    },
)


def backup_target_parts(url: str) -> tuple[str, str, str]:
    """(endpoint, bucket, prefix) of a target URL: the S3 client speaks to the endpoint, path-style."""
    scheme, rest = url.split("://", 1)
    host, _, path = rest.partition("/")
    bucket, _, prefix = path.strip("/").partition("/")
    return f"{scheme}://{host}", bucket, prefix


def object_key(prefix: str, namespace: str, backup: str, disk: str) -> str:
    """Where one disk of one backup lives in the bucket: unique per namespace and backup name."""
    parts = [p for p in (prefix.strip("/"), namespace, backup, f"{disk}.img") if p]
    return "/".join(parts)


def backup_name(vm_name: str, moment: datetime) -> str:
    """``<vm>-<yyyymmdd-hhmmss>`` (UTC), shortened with a digest when the VM's name is long."""
    stamp = moment.astimezone(UTC).strftime("%Y%m%d-%H%M%S")
    room = MAX_BACKUP_NAME_LENGTH - len(stamp) - 1
    if len(vm_name) > room:
        digest = hashlib.sha256(vm_name.encode()).hexdigest()[:6]
        vm_name = f"{vm_name[: room - 7].rstrip('-')}-{digest}"
    return f"{vm_name}-{stamp}"


def new_backup(namespace: str, vm_name: str, moment: datetime, *, requested_by: str) -> dict[str, Any]:
    """A UDSVirtualMachineBackup asking for one backup of ``vm_name`` now (CLI and schedule alike)."""
    return {
        "apiVersion": BACKUP_API_VERSION,
        "kind": BACKUP_KIND,
        "metadata": {
            "name": backup_name(vm_name, moment),
            "namespace": namespace,
            "labels": {BACKUP_VM_LABEL: vm_name},
            "annotations": {REQUESTED_BY_ANNOTATION: requested_by},
        },
        "spec": {"vmName": vm_name},
    }
