"""A compliant VM and its children, rendered by the operator's own renderers, for the compliance tests.

Shared by the unit tests (pure evaluator) and the integration test (the same objects on a real API server),
so both judge exactly what the operator would create.
"""

from __future__ import annotations

import base64
import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from uds_vm_operator.api.models import parse_vm_spec
from uds_vm_operator.render.cloudinit import dump_yaml, render_cloudinit_secret
from uds_vm_operator.render.common import ClusterFacts, Owner
from uds_vm_operator.render.datadisks import render_data_disks
from uds_vm_operator.render.networkpolicy import render_network_policy
from uds_vm_operator.render.virtualmachine import render_virtual_machine

DIGEST = "sha256:" + "ab" * 32
BACKUP_DIGEST = "sha256:" + "cd" * 32
"""The root disk's bytes as a backup recorded them (raw disk content, not the imported image file)."""
BACKUP_TARGET: dict[str, Any] = {
    "url": "https://s3.backup.example:9000/vm-backups/site-a",
    "secretRef": "backup-s3",
}
SPEC: dict[str, Any] = {
    "source": {"upload": {"checksum": DIGEST}},
    "disk": {"virtualSize": "10Mi"},
    "firmware": {"type": "efi-secureboot"},
    "cloudInit": {
        "sshAuthorizedKeys": [
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl op@site"
        ],
        "autoUpdate": {},
    },
    "dataDisks": [{"name": "data", "size": "1Gi", "retentionPolicy": "Retain"}],
    "backup": {"target": BACKUP_TARGET, "schedule": "@daily", "keep": 7},
}
STATUS: dict[str, Any] = {
    "phase": "Ready",
    "checksumVerified": True,
    "verifiedBy": "in-cluster-verifier",
    "verifiedDigest": DIGEST,
}
OPERATOR_CLUSTERROLES = ("uds-vm-operator", "uds-vm-operator-cluster")


def udsvm(name: str, namespace: str, uid: str = "00000000-0000-4000-8000-000000000001") -> dict[str, Any]:
    """The UDSVirtualMachine as the API server returns it (with status)."""
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": copy.deepcopy(SPEC),
        "status": copy.deepcopy(STATUS),
    }


def children(
    name: str,
    namespace: str,
    uid: str = "00000000-0000-4000-8000-000000000001",
    spec_doc: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The child objects the operator renders for the compliant VM (or for ``spec_doc``)."""
    owner = Owner(name, namespace, uid)
    spec = parse_vm_spec(SPEC if spec_doc is None else spec_doc)
    return [
        render_network_policy(owner, spec),
        render_cloudinit_secret(owner, spec),
        render_virtual_machine(owner, spec, ClusterFacts(cdi_http_checksum=True)),
        *render_data_disks(owner, spec),
    ]


def timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with a Z, as the API server and the operator write times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def backup(
    vm: str,
    namespace: str,
    completed: datetime,
    *,
    phase: str = "Succeeded",
    digest: str = BACKUP_DIGEST,
) -> dict[str, Any]:
    """A UDSVirtualMachineBackup of ``vm`` as the API server returns it: Succeeded with each disk's record,
    or (any other phase) without a record."""
    name = f"{vm}-{completed.astimezone(UTC):%Y%m%d-%H%M%S}"
    status: dict[str, Any] = {
        "phase": phase,
        "startedAt": timestamp(completed - timedelta(seconds=95)),
        "message": "copy pod failed: S3 PutObject: 403 AccessDenied" if phase == "Failed" else "",
    }
    if phase == "Succeeded":
        prefix = f"{BACKUP_TARGET['url']}/{namespace}/{name}"
        status |= {
            "consistency": "frozen",
            "completedAt": timestamp(completed),
            "durationSeconds": 95,
            "bytes": 10485760 + 1073741824,
            "disks": [
                {"name": "root", "object": f"{prefix}/root.img", "sha256": digest, "bytes": 10485760},
                {
                    "name": "data",
                    "object": f"{prefix}/data.img",
                    "sha256": "sha256:" + "0e" * 32,
                    "bytes": 1073741824,
                },
            ],
        }
    elif phase == "Failed":
        status["completedAt"] = timestamp(completed)
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachineBackup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"uds.dev/vm": vm},
            "annotations": {"uds.dev/requested-by": "schedule"},
        },
        "spec": {"vmName": vm},
        "status": status,
    }


def restored_spec(source_backup: dict[str, Any]) -> dict[str, Any]:
    """The compliant spec, its root disk restored from ``source_backup``'s root-disk record."""
    root = next(d for d in source_backup["status"]["disks"] if d["name"] == "root")
    spec = copy.deepcopy(SPEC)
    spec["source"] = {
        "s3": {"url": root["object"], "secretRef": BACKUP_TARGET["secretRef"], "checksum": root["sha256"]}
    }
    return spec


def restored_udsvm(name: str, namespace: str, source_backup: dict[str, Any], uid: str) -> dict[str, Any]:
    """A VM restored from ``source_backup`` (annotation uds.dev/restored-from), its disk verified by SI-7."""
    vm = udsvm(name, namespace, uid=uid)
    vm["metadata"]["annotations"] = {"uds.dev/restored-from": source_backup["metadata"]["name"]}
    vm["spec"] = restored_spec(source_backup)
    vm["status"]["verifiedDigest"] = vm["spec"]["source"]["s3"]["checksum"]
    return vm


def restore_uid(uid: str) -> str:
    """The restored VM's uid, derived from its origin's (distinct, stable)."""
    return uid[:-4] + "eeee"


def backup_evidence(
    vm: str,
    namespace: str,
    uid: str = "00000000-0000-4000-8000-000000000001",
    now: datetime | None = None,
    restored_uid: str | None = None,
) -> list[dict[str, Any]]:
    """What makes the compliant ``vm`` satisfy CP-9 and CP-10, everything itself compliant.

    ``vm``'s backup of an hour ago (CP-9, within twice @daily), an older one of five days ago that was
    restored into ``<vm>-restored`` and verified (CP-10), and that restored VM's children and own recent
    backup. The restore comes from the older backup so that one tamper moves one control: spoiling the
    latest backup fails CP-9 (the older one is beyond 48 h) and leaves the restore standing.
    """
    moment = (now or datetime.now(UTC)).replace(microsecond=0)
    latest = backup(vm, namespace, moment - timedelta(hours=1))
    restored_point = backup(vm, namespace, moment - timedelta(days=5))
    restored_name = f"{vm}-restored"
    restored_uid = restored_uid or restore_uid(uid)
    restored = restored_udsvm(restored_name, namespace, restored_point, uid=restored_uid)
    return [
        latest,
        restored_point,
        restored,
        *children(restored_name, namespace, uid=restored_uid, spec_doc=restored["spec"]),
        backup(restored_name, namespace, moment - timedelta(minutes=30)),
    ]


def compliant_objects(
    vm: str,
    namespace: str,
    uid: str = "00000000-0000-4000-8000-000000000001",
    now: datetime | None = None,
    restored_uid: str | None = None,
) -> list[dict[str, Any]]:
    """The compliant VM, its children and its backup evidence (no cluster roles)."""
    return [
        udsvm(vm, namespace, uid=uid),
        *children(vm, namespace, uid=uid),
        *backup_evidence(vm, namespace, uid, now, restored_uid),
    ]


def chart_clusterroles() -> list[dict[str, Any]]:
    """The operator's ClusterRoles and ClusterRoleBindings exactly as deploy/rbac.yaml declares them."""
    text = (Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml").read_text()
    kinds = ("ClusterRole", "ClusterRoleBinding")
    return [doc for doc in yaml.safe_load_all(text) if doc and doc["kind"] in kinds]


PLURALS = {
    "UDSVirtualMachine": "udsvirtualmachines",
    "NetworkPolicy": "networkpolicies",
    "Secret": "secrets",
    "VirtualMachine": "virtualmachines",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "DataVolume": "datavolumes",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "UDSVirtualMachineBackup": "udsvirtualmachinebackups",
}


def api_key(obj: dict[str, Any]) -> tuple[str, str, str]:
    """(group, version, plural) of a manifest, as the evaluator's snapshot is keyed."""
    group, _, version = obj["apiVersion"].rpartition("/")
    return (group, version, PLURALS[obj["kind"]])


def snapshot_of(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Group manifests into the evaluator's snapshot form."""
    snapshot: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for obj in objects:
        snapshot.setdefault(api_key(obj), []).append(obj)
    return snapshot


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The object of that kind and name (fails loudly when the fixture changed)."""
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def edit_userdata(secret: dict[str, Any], change: Any) -> None:
    """Decode the cloud-config in a <vm>-cloudinit Secret, let ``change`` edit it, encode it back."""
    text = base64.b64decode(secret["data"]["userdata"]).decode()
    document = yaml.safe_load(text)
    change(document)
    # The renderer's dumper: yaml.safe_dump folds long commands over lines, which rego-cpp's YAML misreads.
    new_text = "#cloud-config\n" + dump_yaml(document)
    secret["data"]["userdata"] = base64.b64encode(new_text.encode()).decode()


def _widen_ingress(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "NetworkPolicy", f"{vm}-netpol")["spec"]["ingress"] = [{}]


def _open_egress(objs: list[dict[str, Any]], vm: str) -> None:
    rules = find(objs, "NetworkPolicy", f"{vm}-netpol")["spec"]["egress"]
    rules.append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]})


def _password_ssh(objs: list[dict[str, Any]], vm: str) -> None:
    edit_userdata(find(objs, "Secret", f"{vm}-cloudinit"), lambda d: d.update(ssh_pwauth=True))


def _root_allowed(objs: list[dict[str, Any]], vm: str) -> None:
    edit_userdata(find(objs, "Secret", f"{vm}-cloudinit"), lambda d: d.update(disable_root=False))


def _no_fips(objs: list[dict[str, Any]], vm: str) -> None:
    edit_userdata(find(objs, "Secret", f"{vm}-cloudinit"), lambda d: d.pop("ubuntu_pro"))


def _no_updates(objs: list[dict[str, Any]], vm: str) -> None:
    def drop(document: dict[str, Any]) -> None:
        document["packages"] = [p for p in document["packages"] if p != "unattended-upgrades"]

    edit_userdata(find(objs, "Secret", f"{vm}-cloudinit"), drop)


def _digest_removed(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "UDSVirtualMachine", vm)["spec"]["source"]["upload"].pop("checksum")


def _not_verified(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "UDSVirtualMachine", vm)["status"]["checksumVerified"] = False


def _graphics(objs: list[dict[str, Any]], vm: str) -> None:
    domain = find(objs, "VirtualMachine", vm)["spec"]["template"]["spec"]["domain"]
    domain["devices"]["autoattachGraphicsDevice"] = True


def _no_secure_boot(objs: list[dict[str, Any]], vm: str) -> None:
    domain = find(objs, "VirtualMachine", vm)["spec"]["template"]["spec"]["domain"]
    domain["firmware"]["bootloader"]["efi"]["secureBoot"] = False


def _unretained(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "PersistentVolumeClaim", f"{vm}-data-data")["metadata"]["labels"].pop("uds.dev/retain")


def _backups_of(objs: list[dict[str, Any]], vm: str) -> list[dict[str, Any]]:
    """``vm``'s backups, newest first (by completedAt)."""
    found = [
        o
        for o in objs
        if o["kind"] == "UDSVirtualMachineBackup" and o["metadata"]["labels"].get("uds.dev/vm") == vm
    ]
    return sorted(found, key=lambda b: b["status"].get("completedAt", ""), reverse=True)


def _restored_from(objs: list[dict[str, Any]], vm: str) -> dict[str, Any]:
    """The VM restored from one of ``vm``'s backups (backup_evidence makes exactly one)."""
    names = {b["metadata"]["name"] for b in _backups_of(objs, vm)}
    (restored,) = [
        o
        for o in objs
        if o["kind"] == "UDSVirtualMachine"
        and o["metadata"].get("annotations", {}).get("uds.dev/restored-from") in names
    ]
    return restored


def _latest_backup_stale(objs: list[dict[str, Any]], vm: str) -> None:
    latest = _backups_of(objs, vm)[0]["status"]
    completed = datetime.strptime(latest["completedAt"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    latest["completedAt"] = timestamp(completed - timedelta(days=2))  # 49 h old: beyond twice @daily


def _latest_backup_failed(objs: list[dict[str, Any]], vm: str) -> None:
    latest = _backups_of(objs, vm)[0]["status"]
    latest.update(phase="Failed", message="copy pod failed: S3 PutObject: 403 AccessDenied", disks=[])


def _restored_bytes_differ(objs: list[dict[str, Any]], vm: str) -> None:
    # What the operator reports when the verifier hashed the restored disk and it differs from the record.
    status = _restored_from(objs, vm)["status"]
    status.update(phase="Failed", checksumVerified=False, verifiedBy=None, verifiedDigest=None)
    status["conditions"] = [
        {"type": "ChecksumVerified", "status": "False", "reason": "ChecksumMismatch", "message": "mismatch"}
    ]


def _backup_record_altered(objs: list[dict[str, Any]], vm: str) -> None:
    restored = _restored_from(objs, vm)
    source = find(
        objs, "UDSVirtualMachineBackup", restored["metadata"]["annotations"]["uds.dev/restored-from"]
    )
    source["status"]["disks"][0]["sha256"] = "sha256:" + "99" * 32


def _wildcard_rbac(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "ClusterRole", "uds-vm-operator")["rules"][0]["verbs"] = ["*"]


def _cluster_wide_secret_list(objs: list[dict[str, Any]], vm: str) -> None:
    # The cluster-bound role gains Secret list/watch: a read of every namespace's Secrets (issue 32).
    find(objs, "ClusterRole", "uds-vm-operator-cluster")["rules"].append(
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]}
    )


def _cluster_wide_pod_create(objs: list[dict[str, Any]], vm: str) -> None:
    find(objs, "ClusterRole", "uds-vm-operator-cluster")["rules"].append(
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}
    )


TAMPERS = {
    "netpol-admits-all-ingress": ("sc-7", _widen_ingress),
    "netpol-opens-egress": ("sc-7", _open_egress),
    "ssh-password-auth": ("ia-5", _password_ssh),
    "root-login": ("ac-3", _root_allowed),
    "fips-off": ("sc-13", _no_fips),
    "no-guest-updates": ("si-2", _no_updates),
    "digest-removed": ("si-7", _digest_removed),
    "digest-not-verified": ("si-7", _not_verified),
    "graphics-device": ("cm-6", _graphics),
    "secure-boot-off": ("cm-6", _no_secure_boot),
    "data-disk-not-retained": ("cp-9", _unretained),
    "latest-backup-stale": ("cp-9", _latest_backup_stale),
    "latest-backup-failed": ("cp-9", _latest_backup_failed),
    "restored-bytes-differ": ("cp-10", _restored_bytes_differ),
    "backup-record-altered": ("cp-10", _backup_record_altered),
    "operator-rbac-wildcard": ("ac-6", _wildcard_rbac),
    "operator-reads-secrets-cluster-wide": ("ac-6", _cluster_wide_secret_list),
    "operator-creates-pods-cluster-wide": ("ac-6", _cluster_wide_pod_create),
}
"""Each tamper breaks one piece of evidence; the value names the only control that may flip."""
