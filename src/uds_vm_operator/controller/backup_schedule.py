"""Scheduled backups: a VM whose ``spec.backup.schedule`` is due gets a new UDSVirtualMachineBackup.

Keyed by VM, level-triggered: a reconcile lists the VM's backups (one label selector), and when the newest
was asked for a whole period ago (or there is none) and none is still running, asks for the next one, then
looks again when the next is due. The copy itself is the backup controller's job (controller.backup). A
schedule counts from the last backup asked for, so an on-demand backup also resets the clock.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from uds_vm_operator.api import SpecError
from uds_vm_operator.api.backup import BACKUP_VM_LABEL, FINISHED_PHASES, new_backup
from uds_vm_operator.api.models import UDSVirtualMachineSpec, parse_spec_mapping, schedule_seconds
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.controller import Controller, Key, ReconcileResult
from uds_vm_operator.runtime.timestamps import parse_rfc3339

log = logging.getLogger("uds_vm_operator.backup_schedule")

BUSY_RECHECK_S = 60.0
"""A backup of the VM is still running: look again after this, not at the next period."""


class BackupScheduleController(Controller):
    """Creates the VMs' scheduled backups when they are due."""

    kind = kube.UDS_VM
    subject = "backup-schedule"
    queue_name = "backup-schedule"
    record_reconcile_metrics = False
    log = log

    def register(self, registry: Any) -> None:
        """Enqueue a VM when its event shows a new or changed backup schedule (no read for the others)."""
        import kopf  # noqa: PLC0415 (kopf only loads with the operator process)

        generations: dict[Key, object] = {}

        @kopf.on.event(
            kube.UDS_VM.api_version, kube.UDS_VM.plural, registry=registry, id="backup-schedule-vms"
        )
        async def on_vm_event(event: Mapping[str, Any], **_: Any) -> None:
            obj = event.get("object") or {}
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace")), str(meta.get("name")))
            if event.get("type") == "DELETED" or not has_schedule(obj):
                generations.pop(key, None)
                self._queue.cancel_wakeup(key)
                return
            # Only a new or changed spec can move the schedule; the VM's status writes (most of its events)
            # would each cost a read and a list for nothing, the next run being already queued.
            if generations.get(key) == meta.get("generation"):
                return
            generations[key] = meta.get("generation")
            self.enqueue(*key)

    async def reconcile(self, namespace: str, name: str) -> ReconcileResult:
        """Ask for the VM's next backup if it is due; say when to look again."""
        result = ReconcileResult()
        vm = await self.api.get(kube.UDS_VM, namespace, name)
        if vm is None or (vm.get("metadata") or {}).get("deletionTimestamp") or not has_schedule(vm):
            return result
        try:
            spec = parse_spec_mapping(UDSVirtualMachineSpec, vm.get("spec") or {})
        except SpecError:
            return result  # the VM controller reports the invalid spec on the VM itself
        if spec.backup is None or spec.backup.schedule is None:
            return result
        period = schedule_seconds(spec.backup.schedule)
        backups = await self.api.list(
            kube.UDS_VM_BACKUP, namespace, label_selector=f"{BACKUP_VM_LABEL}={name}"
        )
        if any((b.get("status") or {}).get("phase") not in FINISHED_PHASES for b in backups):
            result.requeue_after(BUSY_RECHECK_S)
            return result
        now = self.clock()
        wait = seconds_until_due(backups, period, now)
        if wait > 0:
            result.requeue_after(wait)
            return result
        await self.api.create(new_backup(namespace, name, now, requested_by="schedule"))
        log.info("scheduled backup requested", extra={"vm": f"{namespace}/{name}"})
        result.requeue_after(float(period))
        return result


def has_schedule(vm: Mapping[str, Any]) -> bool:
    """True when the VM's object declares ``spec.backup.schedule`` (read without parsing the whole spec)."""
    return bool(((vm.get("spec") or {}).get("backup") or {}).get("schedule"))


def seconds_until_due(backups: list[dict[str, Any]], period_s: int, now: datetime) -> float:
    """How long until the next backup is due: a period after the newest one was asked for (0 = now)."""
    stamps = (parse_rfc3339((b.get("metadata") or {}).get("creationTimestamp")) for b in backups)
    created = [moment for moment in stamps if moment is not None]
    if not created:
        return 0.0
    return max(0.0, period_s - (now - max(created)).total_seconds())
