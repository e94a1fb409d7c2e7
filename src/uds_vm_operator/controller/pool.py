"""The UDSVirtualMachinePool controller: read the pool and its members, plan, act, report.

Level-triggered like the VM controller: watch events of a pool and of its members only *enqueue* the
pool's key; a reconcile reads the pool and lists its members fresh from the API server (a rollout must
never act on a stale belief about which member is Ready), asks the pure planner (``fleet/planner.py``)
what to do, creates or deletes members, and writes status only when it changed.

* Members are UDSVirtualMachines ``<pool>-<ordinal>``, labelled ``uds.dev/pool`` and
  ``uds.dev/pool-revision``, owned by the pool. Readiness is read from the member's own status only.
* Members carry the finalizer ``uds.dev/release-children`` from birth and are deleted in the background:
  the member stays (with a deletion timestamp) while the VM controller deletes its children itself
  (``controller/release.py``), so a returning ordinal never meets the half-deleted children of its
  predecessor, and a fleet roll does not wait on the garbage collector's rate limit (ADR 0010). A member
  made before that finalizer existed is deleted with ``Foreground`` propagation and waits on the collector,
  as before. ``Retain`` data disks have no ownerReference and survive; the VM controller re-attaches them
  by name when the ordinal comes back.
* The template of every revision is kept in an ``apps/v1`` ControllerRevision ``<pool>-<revision>``
  (as StatefulSets do), so ``rollbackOnFailure`` can recreate members of the previous revision.
* A member that stays un-Ready changes nothing in the cluster, so the controller schedules its own
  re-check for the moment the progress deadline would pass.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from uds_vm_operator.api import SpecError
from uds_vm_operator.api.pool import UDSVirtualMachinePoolStatus, parse_pool_spec, validate_pool_name
from uds_vm_operator.apiversions import UDS_API_VERSION
from uds_vm_operator.fleet import (
    POOL_LABEL,
    REVISION_LABEL,
    CreateMember,
    DeleteMember,
    HaltRollout,
    MemberView,
    PoolRef,
    Rollback,
    member_view,
    parameters_of,
    plan_rollout,
    pool_status,
    render_member,
    resolve_revisions,
    revision_hash,
    seconds_until_next_deadline,
)
from uds_vm_operator.fleet.actions import Action
from uds_vm_operator.fleet.planner import RolloutParameters
from uds_vm_operator.fleet.status import Revisions, condition, count_members, merge_conditions
from uds_vm_operator.metrics import POOL_STATES, OperatorMetrics
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.conditions import by_type
from uds_vm_operator.runtime.controller import Controller, ReconcileResult, utc_now
from uds_vm_operator.runtime.errors import KubeApiError, TerminalError
from uds_vm_operator.runtime.status_writer import StatusWriter
from uds_vm_operator.runtime.workqueue import MAX_BACKOFF_S

log = logging.getLogger("uds_vm_operator.pool")

POOL = kube.register_kind(kube.Kind(UDS_API_VERSION, "UDSVirtualMachinePool", "udsvirtualmachinepools"))
CONTROLLER_REVISION = kube.register_kind(kube.Kind("apps/v1", "ControllerRevision", "controllerrevisions"))

REVISION_HISTORY = 3
"""ControllerRevisions kept per pool (besides the current and update revisions)."""
DEADLINE_SLACK_S = 1.0
"""Re-check this long after a deadline, so the member is certainly past it when we look."""


@dataclass
class PoolOutcome(ReconcileResult):
    """What one reconcile did (tests read it) and when to look again."""

    created: int = 0
    deleted: int = 0
    status_written: bool = False
    halted: bool = False
    rolled_back: bool = False


class PoolMemberNameTakenError(TerminalError):
    """A UDSVirtualMachine outside the pool already has a member's name."""


class PoolTemplateMissingError(TerminalError):
    """The ControllerRevision holding a revision's template is gone, so the pool cannot return to it."""


class PoolController(Controller):
    """The UDSVirtualMachinePool controller (one reconcile per pool at a time), on the shared base."""

    kind = POOL
    subject = "pool"
    queue_name = "pool"
    terminal_delay_s = MAX_BACKOFF_S
    record_reconcile_metrics = False  # pools report pool_replicas, not the VM series
    log = log

    def __init__(
        self,
        api: kube.KubeApi,
        metrics: OperatorMetrics,
        *,
        workers: int = 2,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        super().__init__(api, metrics, workers=workers, clock=clock)
        self.status_writer = StatusWriter(api, POOL, UDSVirtualMachinePoolStatus)
        """The one status write of a reconcile (runtime.status_writer), validated against the CRD's model."""

    # ------------------------------------------------------------------------------------------ wiring

    def register(self, registry: Any) -> None:
        """Add the pool's watch handlers to a kopf registry (``kopf.on.event`` only: kopf writes nothing)."""
        import kopf  # noqa: PLC0415 (kopf only loads with the operator process)

        @kopf.on.event(POOL.api_version, POOL.plural, registry=registry, id="pool-events")
        async def on_pool_event(event: Mapping[str, Any], **_: Any) -> None:
            meta = (event.get("object") or {}).get("metadata") or {}
            namespace, name = str(meta.get("namespace")), str(meta.get("name"))
            if event.get("type") == "DELETED":
                self.forget(namespace, name)
                return
            self.enqueue(namespace, name)

        @kopf.on.event(
            kube.UDS_VM.api_version,
            kube.UDS_VM.plural,
            registry=registry,
            id="pool-member-events",
            labels={POOL_LABEL: kopf.PRESENT},
        )
        async def on_member_event(event: Mapping[str, Any], **_: Any) -> None:
            meta = (event.get("object") or {}).get("metadata") or {}
            pool = (meta.get("labels") or {}).get(POOL_LABEL)
            if pool:
                self.enqueue(str(meta.get("namespace")), str(pool))

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted pool's metric series and pending re-check (its members go with the GC)."""
        self._queue.cancel_wakeup((namespace, name))
        for state in POOL_STATES:
            with contextlib.suppress(KeyError):
                self.metrics.pool_replicas.remove(name, namespace, state)

    # --------------------------------------------------------------------------------------- reconcile

    async def reconcile(self, namespace: str, name: str) -> PoolOutcome:
        """Bring one pool's members one step closer to its spec and publish what was observed."""
        outcome = PoolOutcome()
        pool = await self.api.get(POOL, namespace, name)
        if pool is None or (pool.get("metadata") or {}).get("deletionTimestamp"):
            self.forget(namespace, name)
            return outcome
        meta = pool["metadata"]
        generation = int(meta.get("generation") or 0)
        previous = dict(pool.get("status") or {})
        try:
            validate_pool_name(name)
            spec = parse_pool_spec(pool.get("spec") or {})
        except SpecError as exc:
            await self._report_invalid(pool, previous, exc.message, generation, outcome)
            return outcome

        now = self.clock()
        params = parameters_of(spec)
        raw_template: Mapping[str, Any] = (pool.get("spec") or {}).get("template") or {}
        template_revision = revision_hash(raw_template)
        revisions = resolve_revisions(template_revision, previous)
        if template_revision != previous.get("updateRevision"):
            await self._record_revision(pool, template_revision, raw_template)

        members = await self._members(namespace, name)
        actions, revisions = await self._plan(
            pool,
            params,
            members,
            revisions=revisions,
            template_revision=template_revision,
            now=now,
            outcome=outcome,
        )
        halt = next((a for a in actions if isinstance(a, HaltRollout)), None)
        outcome.halted = halt is not None

        target_template = raw_template
        if revisions.target != template_revision and any(isinstance(a, CreateMember) for a in actions):
            target_template = await self._template_of(pool, revisions.target)
        await self._act(pool, members, actions, target_template, outcome)

        status = pool_status(
            pool_name=name,
            params=params,
            members=members,
            revisions=revisions,
            halt=halt,
            previous=previous,
            generation=generation,
            now=now,
        )
        await self._publish(pool, previous, status, halt, outcome)
        self._record_metrics(namespace, name, params.replicas, members, revisions.target)
        wait_s = seconds_until_next_deadline(params, members, target_revision=revisions.target, now=now)
        recheck_s = None if wait_s is None else wait_s + DEADLINE_SLACK_S
        outcome.requeue_after(recheck_s)
        _log_reconciled(pool, actions, members, revisions.target, recheck_s)
        return outcome

    async def _act(
        self,
        pool: Mapping[str, Any],
        members: Sequence[MemberView],
        actions: Sequence[Action],
        template: Mapping[str, Any],
        outcome: PoolOutcome,
    ) -> None:
        """Create and delete members as planned (the other actions only shape status and Events)."""
        meta = pool["metadata"]
        ref = PoolRef(name=meta["name"], namespace=meta["namespace"], uid=str(meta.get("uid")))
        for action in actions:
            if isinstance(action, CreateMember):
                outcome.created += await self._create_member(pool, ref, template, action)
            elif isinstance(action, DeleteMember):
                outcome.deleted += await self._delete_member(pool, members, action)

    async def _plan(
        self,
        pool: Mapping[str, Any],
        params: RolloutParameters,
        members: Sequence[MemberView],
        *,
        revisions: Revisions,
        template_revision: str,
        now: datetime,
        outcome: PoolOutcome,
    ) -> tuple[list[Action], Revisions]:
        """The planner's actions; a stalled revision that asks for a rollback is planned again, at once,
        towards the previous revision (the failed one is remembered in the returned revisions)."""
        actions = plan_rollout(
            params, members, target_revision=revisions.target, previous_revision=revisions.current, now=now
        )
        rollback = next((a for a in actions if isinstance(a, Rollback)), None)
        if rollback is None:
            return actions, revisions
        halt = next((a for a in actions if isinstance(a, HaltRollout)), None)
        revisions = Revisions(
            template=template_revision,
            target=rollback.to_revision,
            current=revisions.current,
            failed=rollback.from_revision,
        )
        outcome.rolled_back = True
        await self.emit(
            pool,
            "Warning",
            "RolledBack",
            f"revision {rollback.from_revision} stalled ({halt.message if halt else 'deadline'}); "
            f"returning every member to revision {rollback.to_revision}",
        )
        actions = plan_rollout(
            params, members, target_revision=revisions.target, previous_revision=None, now=now
        )
        return actions, revisions

    async def _members(self, namespace: str, pool: str) -> list[MemberView]:
        objects = await self.api.list(kube.UDS_VM, namespace, label_selector=f"{POOL_LABEL}={pool}")
        views = [member_view(pool, obj) for obj in objects]
        return sorted((view for view in views if view is not None), key=lambda view: view.ordinal)

    async def _create_member(
        self, pool: Mapping[str, Any], ref: PoolRef, template: Mapping[str, Any], action: CreateMember
    ) -> int:
        manifest = render_member(ref, template, ordinal=action.ordinal, revision=action.revision)
        try:
            await self.api.create(manifest)
        except KubeApiError as exc:
            if exc.code != 409:
                raise
            await self._check_name_is_ours(pool, ref, manifest["metadata"]["name"])
            return 0  # a previous reconcile created it, or its predecessor is still going away
        log.info(
            "pool member created",
            extra={
                "pool": f"{ref.namespace}/{ref.name}",
                "member": manifest["metadata"]["name"],
                "revision": action.revision,
                "reason": action.reason,
            },
        )
        await self.emit(
            pool,
            "Normal",
            "MemberCreated",
            f"created {manifest['metadata']['name']} (revision {action.revision}, {action.reason})",
        )
        return 1

    async def _check_name_is_ours(self, pool: Mapping[str, Any], ref: PoolRef, name: str) -> None:
        """A member name taken by a VM outside the pool blocks that ordinal: say so instead of waiting."""
        existing = await self.api.get(kube.UDS_VM, ref.namespace, name)
        if (
            existing is None
            or ((existing.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL) == ref.name
        ):
            return
        message = (
            f"UDSVirtualMachine {ref.namespace}/{name} exists but is not a member of pool {ref.name}; "
            "rename or delete it so the pool can use that ordinal"
        )
        await self.emit(pool, "Warning", "MemberNameTaken", message)
        raise PoolMemberNameTakenError(message)

    async def _delete_member(
        self, pool: Mapping[str, Any], members: Sequence[MemberView], action: DeleteMember
    ) -> int:
        meta = pool["metadata"]
        uid = await self._member_uid(meta["namespace"], action.name)
        if uid is None:
            return 0
        releases = next((m.releases_children for m in members if m.name == action.name), False)
        try:
            result = await self.api.delete(
                kube.UDS_VM,
                meta["namespace"],
                action.name,
                uid=uid,
                propagation="Background" if releases else "Foreground",
            )
        except KubeApiError as exc:
            if exc.code == 409:  # the name now belongs to a newer member: leave it alone
                return 0
            raise
        if result is None:
            return 0
        log.info(
            "pool member deleted",
            extra={
                "pool": f"{meta['namespace']}/{meta['name']}",
                "member": action.name,
                "revision": action.revision,
                "reason": action.reason,
            },
        )
        await self.emit(
            pool,
            "Normal",
            "MemberDeleted",
            f"deleting {action.name} (revision {action.revision}, {action.reason})",
        )
        return 1

    async def _member_uid(self, namespace: str, name: str) -> str | None:
        obj = await self.api.get(kube.UDS_VM, namespace, name)
        if obj is None:
            return None
        uid = (obj.get("metadata") or {}).get("uid")
        return str(uid) if uid else None

    # -------------------------------------------------------------------------------------- revisions

    async def _record_revision(
        self, pool: Mapping[str, Any], revision: str, template: Mapping[str, Any]
    ) -> None:
        """Keep the template of ``revision`` in a ControllerRevision so a rollback can return to it.

        Old revisions are pruned to :data:`REVISION_HISTORY`, never the ones the status still names.
        """
        meta = pool["metadata"]
        existing = await self.api.list(
            CONTROLLER_REVISION, meta["namespace"], label_selector=f"{POOL_LABEL}={meta['name']}"
        )
        status = pool.get("status") or {}
        keep = {revision, status.get("currentRevision"), status.get("updateRevision")}
        await self._prune_revisions(meta["namespace"], existing, keep)
        names = {(item.get("metadata") or {}).get("name") for item in existing}
        name = _revision_object_name(meta["name"], revision)
        if name in names:
            return
        number = 1 + max((int(item.get("revision") or 0) for item in existing), default=0)
        manifest = {
            "apiVersion": CONTROLLER_REVISION.api_version,
            "kind": CONTROLLER_REVISION.kind,
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": {POOL_LABEL: meta["name"], REVISION_LABEL: revision},
                "ownerReferences": [
                    PoolRef(
                        name=meta["name"], namespace=meta["namespace"], uid=str(meta["uid"])
                    ).owner_reference()
                ],
            },
            "data": dict(template),
            "revision": number,
        }
        try:
            await self.api.create(manifest)
        except KubeApiError as exc:
            if exc.code != 409:
                raise

    async def _prune_revisions(
        self, namespace: str, existing: Sequence[Mapping[str, Any]], keep: set[str | None]
    ) -> None:
        newest_first = sorted(existing, key=lambda item: int(item.get("revision") or 0), reverse=True)
        for item in newest_first[REVISION_HISTORY:]:
            meta = item.get("metadata") or {}
            if (meta.get("labels") or {}).get(REVISION_LABEL) in keep:
                continue
            try:
                await self.api.delete(
                    CONTROLLER_REVISION,
                    namespace,
                    str(meta.get("name")),
                    uid=meta.get("uid"),
                    propagation=None,
                )
            except KubeApiError as exc:
                if exc.code != 409:  # 409: already replaced by a newer object of that name
                    raise

    async def _template_of(self, pool: Mapping[str, Any], revision: str) -> Mapping[str, Any]:
        meta = pool["metadata"]
        name = _revision_object_name(meta["name"], revision)
        stored = await self.api.get(CONTROLLER_REVISION, meta["namespace"], name)
        if stored is None or not isinstance(stored.get("data"), Mapping):
            raise PoolTemplateMissingError(
                f"ControllerRevision {meta['namespace']}/{name} with the template of revision {revision} is "
                "missing, so the pool cannot roll back to it; change spec.template to roll forward instead"
            )
        data: Mapping[str, Any] = stored["data"]
        return data

    # ------------------------------------------------------------------------------------ publication

    async def _publish(
        self,
        pool: Mapping[str, Any],
        previous: Mapping[str, Any],
        status: Mapping[str, Any],
        halt: HaltRollout | None,
        outcome: PoolOutcome,
    ) -> None:
        if await self.status_writer.publish(pool, status) is not None:
            outcome.status_written = True
        was_stalled = _condition_status(previous, "RolloutStalled") == "True"
        if halt is not None and not was_stalled:
            await self.emit(pool, "Warning", "RolloutStalled", halt.message)
        if status.get("currentRevision") and status.get("currentRevision") != previous.get("currentRevision"):
            await self.emit(
                pool, "Normal", "RolloutComplete", f"every member runs revision {status['currentRevision']}"
            )

    async def _report_invalid(
        self,
        pool: Mapping[str, Any],
        previous: Mapping[str, Any],
        message: str,
        generation: int,
        outcome: PoolOutcome,
    ) -> None:
        now = self.clock()
        fresh = [condition("Ready", False, "InvalidSpec", message, now=now, generation=generation)]
        others = [c for c in previous.get("conditions") or [] if c.get("type") != "Ready"]
        status = {
            **previous,
            "observedGeneration": generation,
            "conditions": merge_conditions(previous.get("conditions"), fresh) + others,
        }
        if await self.status_writer.publish(pool, status) is None:
            return
        outcome.status_written = True
        if _condition_reason(previous, "Ready") != "InvalidSpec":
            await self.emit(pool, "Warning", "InvalidSpec", message)

    def _record_metrics(
        self, namespace: str, name: str, replicas: int, members: Sequence[MemberView], target: str
    ) -> None:
        for state, value in count_members(replicas, members, target).as_states().items():
            self.metrics.pool_replicas.labels(pool=name, namespace=namespace, state=state).set(value)


def _log_reconciled(
    pool: Mapping[str, Any],
    actions: Sequence[Action],
    members: Sequence[MemberView],
    target: str,
    recheck_s: float | None,
) -> None:
    meta = pool["metadata"]
    log.debug(
        "pool reconciled",
        extra={
            "pool": f"{meta['namespace']}/{meta['name']}",
            "actions": ", ".join(type(action).__name__ for action in actions) or "none",
            "members": len(members),
            "target": target,
            "recheck_in_s": None if recheck_s is None else round(recheck_s, 1),
        },
    )


def _revision_object_name(pool: str, revision: str) -> str:
    return f"{pool}-{revision}"


def _condition_status(status: Mapping[str, Any], type_: str) -> str | None:
    entry = by_type(status.get("conditions")).get(type_)
    return None if entry is None else str(entry.get("status"))


def _condition_reason(status: Mapping[str, Any], type_: str) -> str | None:
    entry = by_type(status.get("conditions")).get(type_)
    return None if entry is None else str(entry.get("reason"))


__all__ = ["CONTROLLER_REVISION", "POOL", "PoolController", "PoolOutcome"]
