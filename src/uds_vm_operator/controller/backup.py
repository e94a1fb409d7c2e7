"""The UDSVirtualMachineBackup controller: copy one VM's disks to its S3 target and record what was copied.

A backup moves Pending -> Running -> Succeeded | Failed, once; a finished backup is never redone (ask for a
new one). One reconcile does one step:

* **Start.** Read the VM and its ``spec.backup``; the disks must exist. A running guest is frozen through
  KubeVirt's guest agent (``virtualmachineinstances/freeze``, with an unfreeze deadline so a lost operator
  never leaves it frozen): the copy is then application-consistent (``frozen``). A guest that cannot be
  frozen is copied anyway and the record says ``crash``; a stopped VM is ``stopped``. The copy pod
  (render.backup) is created behind its policy, and the status records the VM's spec and the target.
* **Finish.** The pod's termination message names each object and its sha256. The guest is thawed, the
  status records the disks (the restore's reference), an Event and the metrics say what happened, and
  backups beyond ``keep`` are deleted (the pod deleted their objects after its own copy succeeded).

The record is the backup object's status, which only the operator may write (tenants get no
``udsvirtualmachinebackups/status``); the S3 bucket holds bytes, the cluster holds what they must hash to.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from uds_vm_operator.api import SpecError
from uds_vm_operator.api.backup import (
    BACKUP_VM_LABEL,
    FINISHED_PHASES,
    RESTORED_FROM_ANNOTATION,
    UDSVirtualMachineBackupStatus,
    backup_target_parts,
    object_key,
)
from uds_vm_operator.api.models import UDSVirtualMachineSpec, parse_spec_mapping
from uds_vm_operator.api.quantity import parse_bytes
from uds_vm_operator.child_names import root_dv_name
from uds_vm_operator.controller import ssrf
from uds_vm_operator.controller.source_dns import SourceResolver
from uds_vm_operator.controller.verification_io import verifier_image_from_env
from uds_vm_operator.metrics import OperatorMetrics
from uds_vm_operator.render.backup import (
    BACKUP_LABEL,
    PRUNE_ANNOTATION,
    BackupOwner,
    CopyRequest,
    DiskToCopy,
    copy_pod_name,
    render_copy_network_policy,
    render_copy_pod,
)
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.controller import Controller, Key, ReconcileResult, rfc3339, utc_now
from uds_vm_operator.runtime.errors import KubeApiError
from uds_vm_operator.runtime.status_writer import StatusWriter
from uds_vm_operator.runtime.timestamps import parse_rfc3339
from uds_vm_operator.termination import terminated_state

log = logging.getLogger("uds_vm_operator.backup")

BACKUP = kube.UDS_VM_BACKUP
UNFREEZE_TIMEOUT = "10m"
"""KubeVirt thaws the guest by itself after this, even if the operator is gone mid-copy."""
UNFREEZE_TIMEOUT_S = 600
RUNNING_RECHECK_S = 15.0


@dataclass
class BackupOutcome(ReconcileResult):
    """What one reconcile did (tests read it)."""

    started: bool = False
    finished: str | None = None


class BackupController(Controller):
    """Runs each UDSVirtualMachineBackup once, from the VM's disks to its S3 target."""

    kind = BACKUP
    subject = "backup"
    queue_name = "backup"
    record_reconcile_metrics = False
    log = log

    def __init__(
        self,
        api: kube.KubeApi,
        metrics: OperatorMetrics,
        *,
        workers: int = 2,
        clock: Callable[[], datetime] = utc_now,
        image: str | None = None,
    ) -> None:
        super().__init__(api, metrics, workers=workers, clock=clock)
        self.status_writer = StatusWriter(api, BACKUP, UDSVirtualMachineBackupStatus)
        self.image = image if image is not None else verifier_image_from_env()
        self._subjects: dict[Key, Mapping[str, Any]] = {}
        """Name, namespace and UID of each backup in progress: what a failed reconcile's Event regards."""
        self._copy_pods: set[Key] | None = None
        """Backups whose copy pod exists, from the pod watch (None: not watching, so assume it may)."""
        self.allowlist = ssrf.source_allowlist_from_env()
        self.resolver = SourceResolver()

    # ------------------------------------------------------------------------------------------ wiring

    def register(self, registry: Any) -> None:
        """Watch backups and their copy pods (kopf ``on.event`` only: kopf writes nothing)."""
        import kopf  # noqa: PLC0415 (kopf only loads with the operator process)

        copy_pods: set[Key] = set()
        self._copy_pods = copy_pods

        @kopf.on.event(BACKUP.api_version, BACKUP.plural, registry=registry, id="backup-events")
        async def on_backup_event(event: Mapping[str, Any], **_: Any) -> None:
            obj = event.get("object") or {}
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace")), str(meta.get("name")))
            if event.get("type") == "DELETED":
                self._subjects.pop(key, None)
                return
            # A finished backup has nothing left to do unless its copy pod still exists (the pod's own event
            # enqueues it then): a (re)start lists every backup ever kept without reading one of them again.
            if (obj.get("status") or {}).get("phase") in FINISHED_PHASES and key not in copy_pods:
                return
            self.enqueue(*key)

        @kopf.on.event(
            "v1", "pods", registry=registry, id="backup-copy-pods", labels={BACKUP_LABEL: kopf.PRESENT}
        )
        async def on_copy_pod_event(event: Mapping[str, Any], **_: Any) -> None:
            meta = (event.get("object") or {}).get("metadata") or {}
            backup = (meta.get("labels") or {}).get(BACKUP_LABEL)
            if not backup:
                return
            key = (str(meta.get("namespace")), str(backup))
            if event.get("type") == "DELETED":
                copy_pods.discard(key)
            else:
                copy_pods.add(key)
            self.enqueue(*key)

    def error_subject(self, key: Key) -> Mapping[str, Any] | None:
        """A failed reconcile's Warning Event regards the backup."""
        return self._subjects.get(key)

    def _copy_pod_may_exist(self, key: Key) -> bool:
        return self._copy_pods is None or key in self._copy_pods

    # --------------------------------------------------------------------------------------- reconcile

    async def reconcile(self, namespace: str, name: str) -> BackupOutcome:
        """Take the backup one step: start the copy, or record how it ended."""
        outcome = BackupOutcome()
        backup = await self.api.get(BACKUP, namespace, name)
        if backup is None:
            return outcome
        status = dict(backup.get("status") or {})
        if status.get("phase") in FINISHED_PHASES:
            self._subjects.pop((namespace, name), None)
            if self._copy_pod_may_exist((namespace, name)):
                await self._clean_up(namespace, name)
            return outcome
        meta = backup.get("metadata") or {}
        self._subjects[(namespace, name)] = {
            "metadata": {"name": name, "namespace": namespace, "uid": meta.get("uid")}
        }
        pod = await self.api.get(kube.POD, namespace, copy_pod_name(name))
        if pod is None:
            if status.get("phase") == "Running":
                gone = "the copy pod disappeared before it reported; start a new backup"
                await self._fail(backup, status, gone)
                outcome.finished = "Failed"
                return outcome
            await self._start(backup, status, outcome)
            return outcome
        pod_phase = (pod.get("status") or {}).get("phase")
        if pod_phase in FINISHED_PHASES:
            await self._finish(backup, status, pod, outcome)
            return outcome
        outcome.requeue_after(RUNNING_RECHECK_S)
        return outcome

    # ------------------------------------------------------------------------------------------- start

    async def _start(self, backup: Mapping[str, Any], status: dict[str, Any], outcome: BackupOutcome) -> None:
        meta = backup["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        vm_name = str((backup.get("spec") or {}).get("vmName") or "")
        vm = await self.api.get(kube.UDS_VM, namespace, vm_name)
        if vm is None:
            await self._fail(backup, status, f"UDSVirtualMachine {namespace}/{vm_name} does not exist")
            return
        try:
            spec = parse_spec_mapping(UDSVirtualMachineSpec, vm.get("spec") or {})
        except SpecError as exc:
            await self._fail(backup, status, f"UDSVirtualMachine {vm_name} is invalid: {exc.message}")
            return
        if spec.backup is None:
            await self._fail(
                backup,
                status,
                f"UDSVirtualMachine {vm_name} declares no spec.backup (an S3 target and its Secret); add one",
            )
            return
        if not self.image:
            await self._fail(
                backup,
                status,
                "the operator was not told its own image (UDS_VM_OPERATOR_IMAGE); the chart sets it",
            )
            return
        refusal = await self._private_target(spec.backup.target.url)
        if refusal:
            await self._fail(backup, status, refusal)
            return
        endpoint, bucket, prefix = backup_target_parts(spec.backup.target.url)
        disks = await self._disks(namespace, name, vm_name, prefix)
        if isinstance(disks, str):
            await self._fail(backup, status, disks)
            return
        older = await self._beyond_keep(namespace, vm_name, name, spec.backup.keep)
        request = CopyRequest(
            endpoint=endpoint,
            bucket=bucket,
            region=spec.backup.target.region,
            secret_name=spec.backup.target.secret_ref,
            disks=disks,
            image=self.image,
            prune_keys=tuple(key for _, keys in older for key in keys),
            prune_backups=tuple(backup_name for backup_name, _ in older),
        )
        consistency, why = await self._freeze(namespace, vm_name)
        owner = BackupOwner(name, namespace, str(meta.get("uid")))
        await self.api.apply(render_copy_network_policy(owner, endpoint))
        await self.api.apply(render_copy_pod(owner, request))
        now = rfc3339(self.clock())
        desired = {
            **status,
            "phase": "Running",
            "consistency": consistency,
            "startedAt": now,
            "message": why,
            "target": spec.backup.target.model_dump(by_alias=True, exclude_none=True),
            "vmUid": str((vm.get("metadata") or {}).get("uid") or ""),
            "vmSpec": dict(vm.get("spec") or {}),
        }
        await self.status_writer.publish(backup, desired)
        await self.emit(
            backup,
            "Normal",
            "BackupStarted",
            f"copying {len(disks)} disk(s) of {vm_name} to {spec.backup.target.url} ({consistency}: {why})",
        )
        outcome.started = True
        outcome.requeue_after(RUNNING_RECHECK_S)

    async def _private_target(self, url: str) -> str | None:
        """The same lock as import sources (ADR 0016): no private, loopback, link-local or metadata target
        unless the admin allowlist names it, since the copy pod would send the disk there."""
        host = ssrf.internal_host(url, await self.resolver.addresses(("s3", url)))
        if host is None or ssrf.allowlist_covers(self.allowlist, host):
            return None
        return (
            f"spec.backup.target.url host {host.host} is {host.why}: private, loopback, link-local and "
            "metadata addresses are refused as backup targets unless a cluster admin adds "
            f"{host.entry!r} to the chart value {ssrf.ALLOWLIST_CHART_VALUE} "
            f"(operator env {ssrf.ALLOWLIST_ENV})"
        )

    async def _disks(
        self, namespace: str, backup: str, vm_name: str, prefix: str
    ) -> tuple[DiskToCopy, ...] | str:
        """The VM's root disk, as a claim that exists and is bound; a message when it is not ready."""
        claim = root_dv_name(vm_name)
        pvc = await self.api.get(kube.PVC, namespace, claim)
        if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
            return f"the root disk {claim} of {vm_name} is not a bound PersistentVolumeClaim yet; retry later"
        block = (pvc.get("spec") or {}).get("volumeMode") == "Block"
        capacity = str(((pvc.get("status") or {}).get("capacity") or {}).get("storage") or "0")
        return (
            DiskToCopy(
                name="root",
                claim=claim,
                volume_mode="Block" if block else "Filesystem",
                key=object_key(prefix, namespace, backup, "root"),
                size_bytes=parse_bytes(capacity, field="capacity"),
            ),
        )

    async def _beyond_keep(
        self, namespace: str, vm_name: str, current: str, keep: int
    ) -> list[tuple[str, tuple[str, ...]]]:
        """Succeeded backups that fall out of ``keep`` once this one succeeds, oldest last: (name, keys)."""
        backups = await self.api.list(BACKUP, namespace, label_selector=f"{BACKUP_VM_LABEL}={vm_name}")
        done = [
            b
            for b in backups
            if (b.get("status") or {}).get("phase") == "Succeeded" and b["metadata"]["name"] != current
        ]
        done.sort(key=lambda b: str((b.get("status") or {}).get("completedAt") or ""), reverse=True)
        older = done[max(keep - 1, 0) :]
        if older:  # a backup a VM was restored from is its CP-10 evidence: never pruned while that VM exists
            vms = await self.api.list(kube.UDS_VM, namespace)
            restored_from = {
                ((vm.get("metadata") or {}).get("annotations") or {}).get(RESTORED_FROM_ANNOTATION)
                for vm in vms
            }
            older = [b for b in older if b["metadata"]["name"] not in restored_from]
        return [
            (
                str(b["metadata"]["name"]),
                tuple(_key_of(str(d.get("object") or "")) for d in _recorded_disks(b)),
            )
            for b in older
        ]

    async def _freeze(self, namespace: str, vm_name: str) -> tuple[str, str]:
        """Freeze a running guest's filesystems through its agent; (consistency, why)."""
        vmi = await self.api.get(kube.VIRTUAL_MACHINE_INSTANCE, namespace, vm_name)
        if vmi is None or (vmi.get("status") or {}).get("phase") != "Running":
            return "stopped", "the VM is not running; its disks are copied as they are"
        path = kube.VIRTUAL_MACHINE_INSTANCE_ACTIONS.path(namespace, vm_name, "freeze")
        try:
            await self.api.request(
                "PUT",
                path,
                body={"unfreezeTimeout": UNFREEZE_TIMEOUT},
                accept=kube.ANY_RESPONSE,
                what=f"freeze {namespace}/{vm_name}",
            )
        except KubeApiError as exc:
            log.warning("freeze refused", extra={"backup": f"{namespace}/{vm_name}", "error": str(exc)})
            return "crash", f"the guest could not be frozen ({exc}); the copy is crash-consistent"
        return "frozen", "the guest's filesystems were frozen through its agent for the copy"

    async def _thaw(self, namespace: str, vm_name: str) -> None:
        path = kube.VIRTUAL_MACHINE_INSTANCE_ACTIONS.path(namespace, vm_name, "unfreeze")
        try:
            await self.api.request(
                "PUT", path, accept=kube.ANY_RESPONSE, what=f"unfreeze {namespace}/{vm_name}"
            )
        except KubeApiError as exc:
            log.warning("unfreeze failed", extra={"backup": f"{namespace}/{vm_name}", "error": str(exc)})

    # ------------------------------------------------------------------------------------------ finish

    async def _finish(
        self,
        backup: Mapping[str, Any],
        status: dict[str, Any],
        pod: Mapping[str, Any],
        outcome: BackupOutcome,
    ) -> None:
        meta = backup["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        vm_name = str((backup.get("spec") or {}).get("vmName") or "")
        if status.get("consistency") == "frozen":
            await self._thaw(namespace, vm_name)
        report = termination_report(pod)
        if report.get("result") != "ok":
            why = f" ({status['message']})" if status.get("message") else ""
            failed = f"the copy failed: {report.get('message') or 'no report'}{why}"
            await self._fail(backup, status, failed)
            outcome.finished = "Failed"
            return
        started = parse_rfc3339(status.get("startedAt"))
        now = self.clock()
        duration = round((now - started).total_seconds(), 1) if started else float(report.get("seconds") or 0)
        consistency = status.get("consistency")
        message = status.get("message") or ""
        if consistency == "frozen" and duration > UNFREEZE_TIMEOUT_S:
            consistency = "crash"
            message = f"the copy outlasted the {UNFREEZE_TIMEOUT} freeze, so the guest thawed mid-copy"
        target_url = str((status.get("target") or {}).get("url") or "")
        endpoint, bucket, _ = backup_target_parts(target_url) if target_url else ("", "", "")
        disks: list[dict[str, Any]] = [
            {
                "name": str(d["name"]),
                "object": f"{endpoint}/{bucket}/{d['object']}",
                "sha256": str(d["sha256"]),
                "bytes": int(d["bytes"]),
            }
            for d in report.get("disks") or []
        ]
        total = sum(int(d["bytes"]) for d in disks)
        desired = {
            **status,
            "phase": "Succeeded",
            "consistency": consistency,
            "message": message,
            "completedAt": rfc3339(now),
            "durationSeconds": duration,
            "bytes": total,
            "disks": disks,
        }
        await self.status_writer.publish(backup, desired)
        self.metrics.record_backup(
            namespace, vm_name, "success", size_bytes=total, duration_s=duration, finished_at=now.timestamp()
        )
        summary = ", ".join(f"{d['name']} {d['bytes']} bytes {d['sha256']}" for d in disks)
        note = f"{vm_name} backed up ({consistency}): {summary}"
        await self.emit(backup, "Normal", "BackupSucceeded", note)
        await self._prune(namespace, pod)
        await self._clean_up(namespace, name)
        outcome.finished = "Succeeded"

    async def _prune(self, namespace: str, pod: Mapping[str, Any]) -> None:
        """Delete the records of the backups whose objects the pod deleted (beyond ``keep``)."""
        names = ((pod.get("metadata") or {}).get("annotations") or {}).get(PRUNE_ANNOTATION) or ""
        for old in filter(None, names.split(",")):
            with contextlib.suppress(KubeApiError):
                await self.api.delete(BACKUP, namespace, old)

    async def _fail(self, backup: Mapping[str, Any], status: dict[str, Any], message: str) -> None:
        """Record the failure (the copy's report, or its log's tail, is in the message) and remove the copy
        pod: even a failed pod that names the VM's claim holds it (pvc-protection), so the VM's disk could
        not be deleted while it stays (measured on the real node)."""
        meta = backup["metadata"]
        vm_name = str((backup.get("spec") or {}).get("vmName") or "")
        now = self.clock()
        desired = {**status, "phase": "Failed", "message": message, "completedAt": rfc3339(now)}
        await self.status_writer.publish(backup, desired)
        self.metrics.record_backup(str(meta["namespace"]), vm_name, "failure")
        await self.emit(backup, "Warning", "BackupFailed", message)
        await self._clean_up(str(meta["namespace"]), str(meta["name"]))

    async def _clean_up(self, namespace: str, name: str) -> None:
        """The copy pod and its policy go once the backup's record is written (the policy last)."""
        for kind in (kube.POD, kube.NETWORK_POLICY):
            with contextlib.suppress(KubeApiError):
                await self.api.delete(kind, namespace, copy_pod_name(name))


def termination_report(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The copy container's JSON report, or an error report saying why there is none."""
    terminated = terminated_state(pod)
    if terminated is not None:
        text = terminated.get("message")
        if not text:
            reason = terminated.get("reason") or "terminated"
            return {"result": "error", "message": f"the copy container ended ({reason}) without a report"}
        try:
            report = json.loads(text)
        except json.JSONDecodeError:
            return {"result": "error", "message": f"unreadable report: {text[:200]}"}
        if not isinstance(report, dict):
            return {"result": "error", "message": "the report is not a JSON object"}
        return report
    reason = (pod.get("status") or {}).get("reason") or (pod.get("status") or {}).get("message")
    return {"result": "error", "message": f"the copy pod ended without a report ({reason or 'no reason'})"}


def _restored_from(vm: Mapping[str, Any]) -> str | None:
    return ((vm.get("metadata") or {}).get("annotations") or {}).get(RESTORED_FROM_ANNOTATION)


def _recorded_disks(backup: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((backup.get("status") or {}).get("disks") or [])


def _key_of(object_url: str) -> str:
    """The bucket-relative key of a recorded object URL (``scheme://host/bucket/key``)."""
    path = object_url.split("://", 1)[-1].partition("/")[2]
    return path.partition("/")[2]
