"""Disks and guests as platform citizens on the real API server: backed up by default with recorded
exemptions, rebuildable (delete the VM, re-apply the same YAML, the Retain disk is the same PVC), and guest
OS updates configured through cloud-init for Ubuntu and RHEL."""

from __future__ import annotations

import base64

import yaml

from tests.integration.operator_fixtures import (
    api,
    core_path,
    dv_path,
    operator,
    release_pvcs,
    status_of,
    udsvm,
    vm_path,
    wait_phase,
)
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api", "operator"]  # fixtures used by name

GC_TIMEOUT_S = 120
BACKUP = "uds.dev/backup"
LONGHORN_GROUP = "recurring-job-group.longhorn.io/default"
VELERO_EXCLUDE = "velero.io/exclude-from-backup"
DATA_DISKS = [
    {"name": "data", "size": "1Gi", "retentionPolicy": "Retain"},
    {
        "name": "cache",
        "size": "1Gi",
        "retentionPolicy": "Delete",
        "backup": False,
        "backupExemptionReason": "rebuildable cache; the application re-fills it",
    },
]


def pvc_path(namespace: str, name: str) -> str:
    return core_path(namespace, "persistentvolumeclaims", name)


def test_every_disk_is_backed_up_by_default_and_the_exemption_is_recorded(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    api.apply(udsvm("db", namespace, dataDisks=DATA_DISKS), vm_path(namespace, "db"))
    status = wait_phase(api, operator, namespace, "db", "Pending")
    assert status["backupExemptions"] == [
        {"disk": "cache", "reason": "rebuildable cache; the application re-fills it"}
    ]

    # The root disk: CDI copies every DataVolume label and annotation onto the PVC it creates
    # (newPersistentVolumeClaim in CDI's datavolume controller), so the labels on the DV are the PVC's.
    dv = api.get(dv_path(namespace, "db-dv"))
    assert dv is not None
    assert dv["metadata"]["labels"][BACKUP] == "true"
    assert dv["metadata"]["labels"][LONGHORN_GROUP] == "enabled"
    assert VELERO_EXCLUDE not in dv["metadata"]["labels"]

    data = api.get(pvc_path(namespace, "db-data-data"))
    cache = api.get(pvc_path(namespace, "db-data-cache"))
    assert data is not None and cache is not None
    assert data["metadata"]["labels"][BACKUP] == "true"
    assert data["metadata"]["labels"][LONGHORN_GROUP] == "enabled"
    assert VELERO_EXCLUDE not in data["metadata"]["labels"]
    assert cache["metadata"]["labels"][BACKUP] == "false"
    assert cache["metadata"]["labels"][VELERO_EXCLUDE] == "true"
    assert LONGHORN_GROUP not in cache["metadata"]["labels"]
    assert (
        cache["metadata"]["annotations"]["uds.dev/backup-exemption-reason"]
        == "rebuildable cache; the application re-fills it"
    )

    # A recorded exemption needs its reason: the API server refuses backup: false without one.
    bad = udsvm("nobackup", namespace, dataDisks=[{"name": "x", "size": "1Gi", "backup": False}])
    code, payload = api.create(bad, vm_path(namespace))
    assert code == 422 and "backupExemptionReason" in str(payload)
    operator.stop()
    release_pvcs(api, namespace)


def test_rebuild_drill_delete_and_reapply_keeps_the_retained_disk_and_its_backup_labels(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    manifest = udsvm("app", namespace, dataDisks=DATA_DISKS)
    first = api.apply(manifest, vm_path(namespace, "app"))
    wait_phase(api, operator, namespace, "app", "Pending")
    kept = api.get(pvc_path(namespace, "app-data-data"))
    assert kept is not None and not kept["metadata"].get("ownerReferences")

    api.delete(vm_path(namespace, "app"))

    def collected() -> bool:
        return api.get(dv_path(namespace, "app-dv")) is None and api.get(vm_path(namespace, "app")) is None

    wait_for(collected, GC_TIMEOUT_S, 1.0, what="the VM and its owned DataVolume collected")
    survivor = api.get(pvc_path(namespace, "app-data-data"))
    assert survivor is not None and survivor["metadata"]["uid"] == kept["metadata"]["uid"]
    assert not survivor["metadata"].get("deletionTimestamp")

    second = api.apply(manifest, vm_path(namespace, "app"))  # the same YAML, from git
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    wait_phase(api, operator, namespace, "app", "Pending")
    again = api.get(pvc_path(namespace, "app-data-data"))
    assert again is not None and again["metadata"]["uid"] == kept["metadata"]["uid"]
    assert again["metadata"]["labels"][BACKUP] == "true"
    vm = api.get(f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/app")
    assert vm is not None
    claims = [
        v.get("persistentVolumeClaim", {}).get("claimName") for v in vm["spec"]["template"]["spec"]["volumes"]
    ]
    assert "app-data-data" in claims
    assert status_of(api, namespace, "app")["backupExemptions"][0]["disk"] == "cache"
    operator.stop()
    release_pvcs(api, namespace)


def cloud_config(api: Api, namespace: str, name: str) -> dict[str, object]:
    secret = api.get(core_path(namespace, "secrets", f"{name}-cloudinit"))
    assert secret is not None
    text = base64.b64decode(secret["data"]["userdata"]).decode()
    assert text.startswith("#cloud-config")
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


def test_guest_os_updates_are_configured_for_ubuntu_and_rhel(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    update = {
        "schedule": "Sun *-*-* 02:30:00",
        "rebootWindow": "04:00",
        "aptMirror": "http://mirror.site.internal/ubuntu",
        "yumMirror": "http://mirror.site.internal/rhel9/baseos",
    }
    for name, flavor in (("ubu", "ubuntu"), ("rhel", "rhel")):
        cloud_init = {
            "flavor": flavor,
            "sshAuthorizedKeys": [udsvm("x", namespace)["spec"]["cloudInit"]["sshAuthorizedKeys"][0]],
            "autoUpdate": update,
        }
        api.apply(udsvm(name, namespace, cloudInit=cloud_init), vm_path(namespace, name))
    for name in ("ubu", "rhel"):
        wait_phase(api, operator, namespace, name, "Pending")

    ubuntu = cloud_config(api, namespace, "ubu")
    assert "unattended-upgrades" in ubuntu["packages"]  # type: ignore[operator]
    files = {f["path"]: f["content"] for f in ubuntu["write_files"]}  # type: ignore[attr-defined]
    assert 'APT::Periodic::Unattended-Upgrade "1";' in files["/etc/apt/apt.conf.d/20auto-upgrades"]
    assert 'Automatic-Reboot-Time "04:00"' in files["/etc/apt/apt.conf.d/52uds-unattended-upgrades"]
    timer = files["/etc/systemd/system/apt-daily-upgrade.timer.d/50-uds-schedule.conf"]
    assert "OnCalendar=Sun *-*-* 02:30:00" in timer
    assert ubuntu["apt"]["primary"][0]["uri"] == "http://mirror.site.internal/ubuntu"  # type: ignore[index]
    assert "systemctl enable --now apt-daily-upgrade.timer" in ubuntu["runcmd"]  # type: ignore[operator]

    rhel = cloud_config(api, namespace, "rhel")
    assert "dnf-automatic" in rhel["packages"]  # type: ignore[operator]
    files = {f["path"]: f["content"] for f in rhel["write_files"]}  # type: ignore[attr-defined]
    conf = files["/etc/dnf/automatic.conf"]
    assert "apply_updates = yes" in conf and "reboot = when-needed" in conf
    assert (
        "OnCalendar=Sun *-*-* 02:30:00"
        in files["/etc/systemd/system/dnf-automatic.timer.d/50-uds-schedule.conf"]
    )
    repo = rhel["yum_repos"]["uds-mirror"]  # type: ignore[index]
    assert repo["baseurl"] == "http://mirror.site.internal/rhel9/baseos" and repo["gpgcheck"] is True
    assert "systemctl enable --now dnf-automatic.timer" in rhel["runcmd"]  # type: ignore[operator]
