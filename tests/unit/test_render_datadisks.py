"""Data disks: Retain disks survive the VM (no ownerReference), backup by default with a recorded opt-out."""

from __future__ import annotations

from typing import Any

from uds_vm_operator.api import parse_vm_spec
from uds_vm_operator.render import Owner
from uds_vm_operator.render.datadisks import BACKUP_EXEMPTION_ANNOTATION, render_data_disks

OWNER = Owner("web", "apps", "uid-1")


def disks(*items: dict[str, Any]) -> list[dict[str, Any]]:
    raw = {"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}, "dataDisks": list(items)}
    return render_data_disks(OWNER, parse_vm_spec(raw))


def test_retain_is_the_default_and_carries_no_owner() -> None:
    (pvc,) = disks({"name": "data", "size": "20Gi"})
    meta = pvc["metadata"]
    assert (pvc["kind"], meta["name"]) == ("PersistentVolumeClaim", "web-data-data")
    assert "ownerReferences" not in meta
    assert meta["labels"]["uds.dev/retain"] == "true"
    assert meta["labels"]["uds.dev/vm"] == "web"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_delete_disks_are_owned() -> None:
    (pvc,) = disks({"name": "scratch", "size": "1Gi", "retentionPolicy": "Delete"})
    assert pvc["metadata"]["ownerReferences"] == [OWNER.reference()]
    assert "uds.dev/retain" not in pvc["metadata"]["labels"]


def test_backup_by_default_and_recorded_opt_out() -> None:
    kept, exempt = disks(
        {"name": "data", "size": "1Gi", "storageClassName": "longhorn"},
        {"name": "cache", "size": "1Gi", "backup": False, "backupExemptionReason": "rebuildable cache"},
    )
    assert kept["metadata"]["labels"]["recurring-job-group.longhorn.io/default"] == "enabled"
    assert "velero.io/exclude-from-backup" not in kept["metadata"]["labels"]
    assert kept["spec"]["storageClassName"] == "longhorn"
    assert exempt["metadata"]["labels"]["velero.io/exclude-from-backup"] == "true"
    assert "recurring-job-group.longhorn.io/default" not in exempt["metadata"]["labels"]
    assert exempt["metadata"]["annotations"][BACKUP_EXEMPTION_ANNOTATION] == "rebuildable cache"


def test_names_are_stable_so_a_recreated_vm_reattaches_them() -> None:
    assert disks({"name": "data", "size": "1Gi"}) == disks({"name": "data", "size": "1Gi"})
