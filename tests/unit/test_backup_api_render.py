"""spec.backup, the backup object's names and keys, the copy pod, and the restore's declaration (all pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from uds_vm_operator.api.backup import (
    MAX_BACKUP_NAME_LENGTH,
    backup_name,
    backup_target_parts,
    new_backup,
    object_key,
)
from uds_vm_operator.api.models import BackupPolicy, UDSVirtualMachineSpec, schedule_seconds
from uds_vm_operator.cli._kube import CliKubeError
from uds_vm_operator.cli.backup import restored_vm
from uds_vm_operator.controller.backup import termination_report
from uds_vm_operator.controller.backup_schedule import seconds_until_due
from uds_vm_operator.render.backup import (
    BackupOwner,
    CopyRequest,
    DiskToCopy,
    copy_deadline_seconds,
    render_copy_network_policy,
    render_copy_pod,
)

TARGET = {"url": "https://s3.site.internal/vm-backups/site-a", "secretRef": "backup-s3"}
SHA = "sha256:" + "c" * 64


@pytest.mark.parametrize(
    ("schedule", "seconds"),
    [("@hourly", 3600), ("@daily", 86400), ("@weekly", 604800), ("@every 6h", 21600), ("@every 5m", 300)],
)
def test_schedules_have_the_period_cp9_judges_against(schedule: str, seconds: int) -> None:
    assert schedule_seconds(schedule) == seconds
    assert BackupPolicy.model_validate({"target": TARGET, "schedule": schedule}).schedule == schedule


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"target": TARGET, "schedule": "@every 4m"}, "more often than every 5 minutes"),
        ({"target": TARGET, "schedule": "0 * * * *"}, "schedule"),
        ({"target": {**TARGET, "url": "s3://bucket"}, "keep": 1}, "url"),
        ({"target": {**TARGET, "url": "https://s3.site.internal/B!"}}, "url"),
        ({"target": TARGET, "keep": 0}, "keep"),
        ({"target": {"url": TARGET["url"]}}, "secretRef"),
    ],
)
def test_bad_backup_policies_are_refused_with_the_field_named(policy: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        BackupPolicy.model_validate(policy)
    assert message in str(refused.value)


def test_target_url_splits_into_endpoint_bucket_prefix_and_keys_are_unique_per_namespace_and_backup() -> None:
    assert backup_target_parts("http://10.244.0.1:7070/vm-backups/site-a/") == (
        "http://10.244.0.1:7070",
        "vm-backups",
        "site-a",
    )
    assert backup_target_parts("https://s3.example/bkt") == ("https://s3.example", "bkt", "")
    assert object_key("site-a", "ns", "web-1", "root") == "site-a/ns/web-1/root.img"
    assert object_key("", "ns", "web-1", "root") == "ns/web-1/root.img"


def test_backup_names_fit_the_limit_even_for_the_longest_vm_names() -> None:
    moment = datetime(2026, 12, 3, 22, 5, 9, tzinfo=UTC)
    assert backup_name("web", moment) == "web-20261203-220509"
    long_a, long_b = "a" * 52, "a" * 51 + "b"
    assert len(backup_name(long_a, moment)) <= MAX_BACKUP_NAME_LENGTH
    assert backup_name(long_a, moment) != backup_name(long_b, moment), "a digest keeps long names apart"
    manifest = new_backup("ns", "web", moment, requested_by="schedule")
    assert manifest["metadata"]["labels"] == {"uds.dev/vm": "web"}
    assert manifest["spec"] == {"vmName": "web"}


def _request(**overrides: Any) -> CopyRequest:
    base: dict[str, Any] = {
        "endpoint": "https://s3.site.internal",
        "bucket": "vm-backups",
        "region": None,
        "secret_name": "backup-s3",
        "disks": (DiskToCopy("root", "web-dv", "Filesystem", "site-a/ns/b/root.img", 2 << 30),),
        "image": "registry.site.internal/uds-vm-operator:1",
    }
    base.update(overrides)
    return CopyRequest(**base)


OWNER = BackupOwner("web-1", "ns", "uid-1")


def test_the_copy_pod_is_restricted_reads_disks_read_only_and_gets_keys_only_from_the_users_secret() -> None:
    pod = render_copy_pod(OWNER, _request())
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    assert spec["volumes"] == [
        {"name": "disk-0", "persistentVolumeClaim": {"claimName": "web-dv", "readOnly": True}}
    ]
    assert container["volumeMounts"] == [{"name": "disk-0", "mountPath": "/disk-0", "readOnly": True}]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"]
    assert security["capabilities"] == {"drop": ["ALL"]} and not security["allowPrivilegeEscalation"]
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert secrets == {
        "UDS_BACKUP_ACCESS_KEY_ID": {"name": "backup-s3", "key": "accessKeyId"},
        "UDS_BACKUP_SECRET_ACCESS_KEY": {"name": "backup-s3", "key": "secretKey"},
    }
    assert "root=/disk-0/disk.img=site-a/ns/b/root.img" in container["command"]
    assert "uds.dev/vm" not in pod["metadata"]["labels"], "the VM controller must not adopt or prune it"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "UDSVirtualMachineBackup"
    assert spec["activeDeadlineSeconds"] == copy_deadline_seconds(2 << 30) > 600


def test_block_disks_are_attached_as_devices_and_prune_keys_are_passed() -> None:
    request = _request(
        disks=(DiskToCopy("root", "web-dv", "Block", "k/root.img", 1 << 30),),
        prune_keys=("k/old/root.img",),
        prune_backups=("web-0",),
        region="us-east-1",
    )
    pod = render_copy_pod(OWNER, request)
    (container,) = pod["spec"]["containers"]
    assert container["volumeDevices"] == [{"name": "disk-0", "devicePath": "/dev/uds-disk-0"}]
    assert "volumeMounts" not in container
    command = container["command"]
    assert command[command.index("--prune") + 1] == "k/old/root.img"
    assert command[command.index("--region") + 1] == "us-east-1"
    assert pod["metadata"]["annotations"] == {"uds.dev/prune-backups": "web-0"}


def test_the_copy_policy_admits_nothing_and_lets_out_only_dns_and_the_targets_port() -> None:
    policy = render_copy_network_policy(OWNER, "https://s3.site.internal")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in policy["spec"]
    assert policy["spec"]["egress"][1] == {"ports": [{"protocol": "TCP", "port": 443}]}
    assert (
        render_copy_network_policy(OWNER, "http://10.0.0.1:7070")["spec"]["egress"][1]["ports"][0]["port"]
        == 7070
    )


def _pod(message: str | None, reason: str = "Completed") -> dict[str, Any]:
    terminated: dict[str, Any] = {"exitCode": 0, "reason": reason}
    if message is not None:
        terminated["message"] = message
    return {"status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": terminated}}]}}


def test_the_copy_report_is_read_from_the_termination_message_and_its_absence_is_an_error() -> None:
    assert termination_report(_pod('{"result": "ok", "disks": []}')) == {"result": "ok", "disks": []}
    assert "OOMKilled" in termination_report(_pod(None, "OOMKilled"))["message"]
    assert "unreadable" in termination_report(_pod("not json"))["message"]
    assert (
        termination_report({"status": {"phase": "Failed", "reason": "DeadlineExceeded"}})["result"] == "error"
    )


def test_a_schedule_is_due_a_period_after_the_newest_backup() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    assert seconds_until_due([], 3600, now) == 0
    backups = [
        {"metadata": {"creationTimestamp": "2026-12-03T11:30:00Z"}},
        {"metadata": {"creationTimestamp": "2026-12-03T09:00:00Z"}},
    ]
    assert seconds_until_due(backups, 3600, now) == 1800
    assert seconds_until_due(backups, 600, now) == 0


def _record(**status: Any) -> dict[str, Any]:
    base = {
        "phase": "Succeeded",
        "target": TARGET,
        "disks": [
            {
                "name": "root",
                "object": "https://s3.site.internal/vm-backups/k/root.img",
                "sha256": SHA,
                "bytes": 2147483648,
            }
        ],
        "vmSpec": {
            "source": {
                "http": {"url": "https://images.site.internal/web.raw", "checksum": "sha256:" + "d" * 64}
            },
            "disk": {"virtualSize": "1Gi", "storageClassName": "fast"},
            "imageRecord": "web-record",
            "backup": {"target": TARGET},
            "cloudInit": {"sshAuthorizedKeys": ["ssh-ed25519 AAAA ops"]},
        },
    }
    base.update(status)
    return {"metadata": {"name": "web-20261203-220509", "namespace": "ns"}, "status": base}


def test_a_restore_declares_the_backed_up_spec_with_its_root_disk_from_the_record() -> None:
    vm = restored_vm(_record(), "web-back")
    assert vm["metadata"] == {
        "name": "web-back",
        "namespace": "ns",
        "annotations": {"uds.dev/restored-from": "web-20261203-220509"},
    }
    assert vm["spec"]["source"] == {
        "s3": {
            "url": "https://s3.site.internal/vm-backups/k/root.img",
            "secretRef": "backup-s3",
            "checksum": SHA,
        }
    }
    assert vm["spec"]["disk"] == {"virtualSize": 2147483648, "storageClassName": "fast"}
    assert "imageRecord" not in vm["spec"], "the image record sealed the old source, not the backup"
    assert UDSVirtualMachineSpec.model_validate(vm["spec"]).declared_checksum == SHA


def test_a_restore_without_a_root_disk_record_is_refused() -> None:
    with pytest.raises(CliKubeError, match="records no root disk"):
        restored_vm(_record(disks=[]), "web-back")
    with pytest.raises(CliKubeError, match="no VM spec"):
        restored_vm(_record(vmSpec=None), "web-back")
