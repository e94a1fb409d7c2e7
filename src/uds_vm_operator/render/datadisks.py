"""Data disk PVCs ``<name>-data-<disk>`` (blank volumes for application data).

``Retain`` disks carry no ownerReference and the label ``uds.dev/retain: "true"``: deleting the
UDSVirtualMachine leaves them (and their data) in place, and a VM re-created under the same name re-attaches
them by name (CP-9, rebuildability). ``Delete`` disks are owned and garbage-collected with the VM.

Backed up by default: Velero's volume policy is pod-level, so the per-PVC switch is the opt-out label
``velero.io/exclude-from-backup``; Longhorn snapshots/backups follow the ``default`` recurring-job group
label.
An opt-out records its reason in an annotation, which the controller surfaces in status.
"""

from __future__ import annotations

from typing import Any

from uds_vm_operator.api.models import DataDisk, UDSVirtualMachineSpec
from uds_vm_operator.child_names import data_disk_pvc_name
from uds_vm_operator.render.common import RETAIN_LABEL, ROLE_LABEL, Owner, child_metadata

DATA_DISK_LABEL = "uds.dev/data-disk"
BACKUP_LABEL = "uds.dev/backup"
LONGHORN_DEFAULT_GROUP_LABEL = "recurring-job-group.longhorn.io/default"
VELERO_EXCLUDE_LABEL = "velero.io/exclude-from-backup"
BACKUP_EXEMPTION_ANNOTATION = "uds.dev/backup-exemption-reason"


def backup_labels(backup: bool) -> dict[str, str]:
    """Labels that put a volume into (or explicitly out of) the platform's backups."""
    if backup:
        return {BACKUP_LABEL: "true", LONGHORN_DEFAULT_GROUP_LABEL: "enabled"}
    return {BACKUP_LABEL: "false", VELERO_EXCLUDE_LABEL: "true"}


def render_data_disk(owner: Owner, disk: DataDisk) -> dict[str, Any]:
    """One data disk PVC; owned unless its retention policy is ``Retain``."""
    retain = disk.retention_policy == "Retain"
    labels = {ROLE_LABEL: "data-disk", DATA_DISK_LABEL: disk.name, **backup_labels(disk.backup)}
    if retain:
        labels[RETAIN_LABEL] = "true"
    annotations = (
        {BACKUP_EXEMPTION_ANNOTATION: disk.backup_exemption_reason}
        if not disk.backup and disk.backup_exemption_reason
        else None
    )
    pvc_spec: dict[str, Any] = {
        "accessModes": list(disk.access_modes or ("ReadWriteOnce",)),
        "volumeMode": disk.volume_mode,
        "resources": {"requests": {"storage": disk.size}},
    }
    if disk.storage_class_name:
        pvc_spec["storageClassName"] = disk.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": child_metadata(
            owner,
            data_disk_pvc_name(owner.name, disk.name),
            owned=not retain,
            labels=labels,
            annotations=annotations,
        ),
        "spec": pvc_spec,
    }


def render_data_disks(owner: Owner, spec: UDSVirtualMachineSpec) -> list[dict[str, Any]]:
    """Every data disk PVC, in declaration order."""
    return [render_data_disk(owner, disk) for disk in spec.data_disks]
