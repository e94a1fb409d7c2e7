"""The backup controller, one reconcile at a time against the real control plane (envtest).

Played here: the kubelet. No pod runs on envtest, so the test writes the copy pod's end (its phase and its
termination message) as the kubelet would. The real node tier (tests/node/cdi/test_cdi_backup_restore.py)
runs the same steps with the pod really copying to a real S3 server, the guest really frozen, and the
restore really verified and booted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from prometheus_client import generate_latest

from tests.integration.operator_fixtures import api, core_path, release_pvcs, udsvm, vm_path
from tests.integration.operator_harness import Api
from uds_vm_operator.controller import factory
from uds_vm_operator.metrics import OperatorMetrics
from uds_vm_operator.runtime import kube

__all__ = ["api"]  # fixture used by name


@pytest.fixture(autouse=True)
def no_pod_left(api: Api, namespace: str) -> Iterator[None]:
    """envtest runs no kubelet and no pvc-protection controller: the copy pods are removed at once (grace 0)
    and the claims released when each test ends, or the namespace would stay Terminating."""
    yield
    release_pvcs(api, namespace)
    for pod in api.items(core_path(namespace, "pods")):
        api.call(
            "DELETE",
            core_path(namespace, "pods", pod["metadata"]["name"]),
            {"gracePeriodSeconds": 0},
            expect=(200, 202, 404),
        )


T = TypeVar("T")
BACKUPS = "/apis/uds.dev/v1alpha1/namespaces/{ns}/udsvirtualmachinebackups"
TARGET = {"url": "http://s3.site.internal:7070/vm-backups/site-a", "secretRef": "backup-s3"}
SHA = "sha256:" + "b" * 64
IMAGE = "registry.site.internal/uds-vm-operator:test"


def in_process(kubeconfig: Any, scenario: Callable[[kube.KubeApi, OperatorMetrics], Awaitable[T]]) -> T:
    async def main() -> T:
        client = kube.KubeApi.from_kubeconfig(kubeconfig)
        try:
            return await scenario(client, OperatorMetrics(process_collectors=False))
        finally:
            await client.close()

    return asyncio.run(main())


def reconcile_backups(kubeconfig: Any, namespace: str, *names: str) -> tuple[list[Any], str]:
    """One reconcile of each named backup, in order, by the controller the process builds (its image set);
    returns the outcomes and the metrics exposition after them."""

    async def scenario(client: kube.KubeApi, metrics: OperatorMetrics) -> tuple[list[Any], str]:
        controller, _ = factory.backup_controllers(client, metrics)
        controller.image = IMAGE
        outcomes = [await controller.reconcile(namespace, name) for name in names]
        return outcomes, generate_latest(metrics.registry).decode()

    return in_process(kubeconfig, scenario)


def backup_path(namespace: str, name: str | None = None) -> str:
    base = BACKUPS.format(ns=namespace)
    return f"{base}/{name}" if name else base


def bound_root_disk(api: Api, namespace: str, vm: str, size: str = "2Gi") -> None:
    """The VM's root claim, bound (the status a provisioner and CDI would have left)."""
    claim = f"{vm}-dv"
    api.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
        },
        core_path(namespace, "persistentvolumeclaims", claim),
    )
    api.call(
        "PATCH",
        core_path(namespace, "persistentvolumeclaims", claim) + "/status",
        {"status": {"phase": "Bound", "capacity": {"storage": size}}},
        content_type="application/merge-patch+json",
    )


def ask_backup(api: Api, namespace: str, name: str, vm: str) -> None:
    api.create(
        {
            "apiVersion": "uds.dev/v1alpha1",
            "kind": "UDSVirtualMachineBackup",
            "metadata": {"name": name, "namespace": namespace, "labels": {"uds.dev/vm": vm}},
            "spec": {"vmName": vm},
        },
        backup_path(namespace),
    )


def play_pod_end(
    api: Api, namespace: str, pod: str, report: dict[str, Any], phase: str = "Succeeded"
) -> None:
    """What the kubelet writes when the copy container exits (played: envtest runs no pods)."""
    api.call(
        "PATCH",
        core_path(namespace, "pods", pod) + "/status",
        {
            "status": {
                "phase": phase,
                "containerStatuses": [
                    {
                        "name": "backup-disks",
                        "image": IMAGE,
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 0 if phase == "Succeeded" else 1,
                                "reason": "Completed" if phase == "Succeeded" else "Error",
                                "message": json.dumps(report),
                            }
                        },
                    }
                ],
            }
        },
        content_type="application/merge-patch+json",
    )


def test_a_backup_runs_its_copy_pod_and_records_each_disk_sha256(
    api: Api, control_plane: Any, namespace: str
) -> None:
    api.apply(udsvm("web", namespace, backup={"target": TARGET, "keep": 1}), vm_path(namespace, "web"))
    bound_root_disk(api, namespace, "web")
    ask_backup(api, namespace, "web-old", "web")
    ask_backup(api, namespace, "web-new", "web")

    (started,), _ = reconcile_backups(control_plane.kubeconfig, namespace, "web-old")
    assert started.started
    pod = api.get(core_path(namespace, "pods", "web-old-copy"))
    assert pod is not None
    container = pod["spec"]["containers"][0]
    assert container["command"][:2] == ["uds-vm-operator", "backup-disks"]
    assert "root=/disk-0/disk.img=site-a/" + namespace + "/web-old/root.img" in container["command"]
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "web-dv", "readOnly": True}
    assert pod["spec"]["automountServiceAccountToken"] is False
    env = {e["name"]: e.get("valueFrom") for e in container["env"]}
    assert env["UDS_BACKUP_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "backup-s3", "key": "secretKey"}}
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "UDSVirtualMachineBackup"
    policy = api.get(f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/web-old-copy")
    assert policy is not None and policy["spec"]["egress"][1]["ports"] == [{"protocol": "TCP", "port": 7070}]
    status = api.get(backup_path(namespace, "web-old"))["status"]  # type: ignore[index]
    assert (status["phase"], status["consistency"]) == ("Running", "stopped"), status
    assert status["vmSpec"]["backup"]["target"] == TARGET and status["target"] == TARGET

    key = f"site-a/{namespace}/web-old/root.img"
    play_pod_end(
        api,
        namespace,
        "web-old-copy",
        {"result": "ok", "disks": [{"name": "root", "object": key, "sha256": SHA, "bytes": 2147483648}]},
    )

    (outcome,), exposition = reconcile_backups(control_plane.kubeconfig, namespace, "web-old")
    assert outcome.finished == "Succeeded"
    status = api.get(backup_path(namespace, "web-old"))["status"]  # type: ignore[index]
    assert status["phase"] == "Succeeded" and status["bytes"] == 2147483648
    assert status["disks"] == [
        {
            "name": "root",
            "object": f"http://s3.site.internal:7070/vm-backups/{key}",
            "sha256": SHA,
            "bytes": 2147483648,
        }
    ]
    assert api.get(core_path(namespace, "pods", "web-old-copy")) is None, "the copy pod is removed"
    assert f'uds_vm_backup_size_bytes{{namespace="{namespace}",vm="web"}} 2.147483648e+09' in exposition
    assert 'uds_vm_backups_total{result="success"} 1.0' in exposition
    reasons = {e["reason"] for e in api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")}
    assert {"BackupStarted", "BackupSucceeded"} <= reasons

    assert_keep_prunes_the_oldest(api, control_plane, namespace, key)


def assert_keep_prunes_the_oldest(api: Api, control_plane: Any, namespace: str, key: str) -> None:
    """keep: 1 -> the next backup's pod deletes the old objects, and its success deletes the old record."""

    reconcile_backups(control_plane.kubeconfig, namespace, "web-new")
    pod = api.get(core_path(namespace, "pods", "web-new-copy"))
    assert pod is not None
    command = pod["spec"]["containers"][0]["command"]
    assert command[command.index("--prune") + 1] == key
    play_pod_end(
        api,
        namespace,
        "web-new-copy",
        {
            "result": "ok",
            "disks": [{"name": "root", "object": key.replace("old", "new"), "sha256": SHA, "bytes": 1}],
        },
    )
    reconcile_backups(control_plane.kubeconfig, namespace, "web-new")
    assert api.get(backup_path(namespace, "web-old")) is None, "the backup beyond keep is deleted"
    assert api.get(backup_path(namespace, "web-new"))["status"]["phase"] == "Succeeded"  # type: ignore[index]


def test_a_failed_copy_and_a_vm_without_a_target_fail_the_backup_with_a_clear_message(
    api: Api, control_plane: Any, namespace: str
) -> None:
    api.apply(udsvm("plain", namespace), vm_path(namespace, "plain"))
    private = {"target": {**TARGET, "url": "http://169.254.169.254/latest"}}
    api.apply(udsvm("meta", namespace, backup=private), vm_path(namespace, "meta"))
    bound_root_disk(api, namespace, "meta")
    ask_backup(api, namespace, "meta-1", "meta")
    api.apply(udsvm("web", namespace, backup={"target": TARGET}), vm_path(namespace, "web"))
    bound_root_disk(api, namespace, "web")
    ask_backup(api, namespace, "plain-1", "plain")
    ask_backup(api, namespace, "web-1", "web")

    reconcile_backups(control_plane.kubeconfig, namespace, "plain-1", "meta-1", "web-1")
    plain = api.get(backup_path(namespace, "plain-1"))["status"]  # type: ignore[index]
    meta = api.get(backup_path(namespace, "meta-1"))["status"]  # type: ignore[index]
    assert meta["phase"] == "Failed" and "169.254.169.254" in meta["message"], meta
    assert api.get(core_path(namespace, "pods", "meta-1-copy")) is None, "nothing is sent to a private target"
    assert plain["phase"] == "Failed" and "declares no spec.backup" in plain["message"], plain
    play_pod_end(
        api,
        namespace,
        "web-1-copy",
        {"result": "error", "message": "PUT vm-backups/x: 403 SignatureDoesNotMatch: bad key"},
        phase="Failed",
    )

    reconcile_backups(control_plane.kubeconfig, namespace, "web-1")
    web = api.get(backup_path(namespace, "web-1"))["status"]  # type: ignore[index]
    assert web["phase"] == "Failed" and "SignatureDoesNotMatch" in web["message"], web
    assert api.get(core_path(namespace, "pods", "web-1-copy")) is None, (
        "a failed copy pod is removed (it would hold the VM's claim); its report is in the status"
    )
    warnings = [
        e
        for e in api.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
        if e["reason"] == "BackupFailed"
    ]
    assert len(warnings) == 3 and all(e["type"] == "Warning" for e in warnings)


def test_the_schedule_asks_for_a_backup_when_due_and_not_before(
    api: Api, control_plane: Any, namespace: str
) -> None:
    api.apply(
        udsvm("web", namespace, backup={"target": TARGET, "schedule": "@hourly"}), vm_path(namespace, "web")
    )

    async def twice(client: kube.KubeApi, metrics: OperatorMetrics) -> tuple[Any, Any]:
        _, schedule = factory.backup_controllers(client, metrics)
        return await schedule.reconcile(namespace, "web"), await schedule.reconcile(namespace, "web")

    first, second = in_process(control_plane.kubeconfig, twice)
    backups = api.items(backup_path(namespace), "uds.dev/vm=web")
    assert len(backups) == 1, "one backup asked for, the second reconcile sees it pending"
    assert backups[0]["metadata"]["annotations"]["uds.dev/requested-by"] == "schedule"
    assert first.requeue_after_s == 3600 and second.requeue_after_s == 60
