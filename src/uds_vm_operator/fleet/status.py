"""Pool status from what was observed (pure): counts, revisions and conditions.

Counts describe members that are not being deleted, as the controller listed them; a member on its way out
is not counted (its VM is going away). ``currentRevision`` only advances when a rollout is complete, which
is what makes it the safe place to roll back to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from uds_vm_operator.fleet.actions import HaltRollout
from uds_vm_operator.fleet.members import MemberView
from uds_vm_operator.fleet.planner import RolloutParameters, min_ready, rollout_complete
from uds_vm_operator.render.common import POOL_LABEL
from uds_vm_operator.runtime.conditions import FALSE, TRUE, Condition, by_type, stamp, transition_time
from uds_vm_operator.runtime.timestamps import rfc3339


@dataclass(frozen=True)
class Revisions:
    """Which revision the pool is moving to, and why."""

    template: str
    target: str
    current: str | None
    failed: str | None

    @property
    def rolled_back(self) -> bool:
        """True while the template's revision is the one that failed and the pool holds the previous one."""
        return self.target != self.template


def resolve_revisions(template_revision: str, status: Mapping[str, Any] | None) -> Revisions:
    """Pick the target revision: the template's, unless that exact revision stalled and was rolled back.

    A rolled-back revision is not retried (that would loop: roll out, stall, roll back, ...); the user
    changes ``spec.template`` and the new revision rolls out normally.
    """
    status = status or {}
    current = status.get("currentRevision") or None
    failed = status.get("failedRevision") or None
    if failed == template_revision and current and current != template_revision:
        return Revisions(template=template_revision, target=current, current=current, failed=failed)
    return Revisions(template=template_revision, target=template_revision, current=current, failed=None)


@dataclass(frozen=True)
class MemberCounts:
    """The numbers behind ``status`` and the ``uds_vm_pool_replicas`` metric."""

    desired: int
    active: int
    ready: int
    updated: int
    outdated: int

    def as_states(self) -> dict[str, int]:
        """Map metric ``state`` label values to counts."""
        return {
            "desired": self.desired,
            "active": self.active,
            "ready": self.ready,
            "updated": self.updated,
            "outdated": self.outdated,
        }


def count_members(replicas: int, members: Sequence[MemberView], target_revision: str) -> MemberCounts:
    """Count the members that are not being deleted by readiness and revision."""
    active = [member for member in members if not member.deleting]
    updated = sum(1 for member in active if member.revision == target_revision)
    return MemberCounts(
        desired=replicas,
        active=len(active),
        ready=sum(1 for member in active if member.ready),
        updated=updated,
        outdated=len(active) - updated,
    )


def condition(
    type_: str, status: bool, reason: str, message: str, *, now: datetime, generation: int | None
) -> dict[str, Any]:
    """One ``metav1.Condition``-shaped dict, stamped ``now`` (:func:`merge_conditions` keeps older times)."""
    value = Condition(TRUE if status else FALSE, reason, message)
    return stamp(type_, value, None, now=rfc3339(now), generation=generation)


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None, fresh: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Keep ``lastTransitionTime`` of conditions whose status did not change, so a resync writes nothing."""
    stored = by_type(previous)
    return [
        {
            **entry,
            "lastTransitionTime": transition_time(
                entry["status"], stored.get(entry["type"]), entry["lastTransitionTime"]
            ),
        }
        for entry in fresh
    ]


def pool_status(
    *,
    pool_name: str,
    params: RolloutParameters,
    members: Sequence[MemberView],
    revisions: Revisions,
    halt: HaltRollout | None,
    previous: Mapping[str, Any] | None,
    generation: int | None,
    now: datetime,
) -> dict[str, Any]:
    """The full ``status`` of a pool after one reconcile (only what changed needs writing)."""
    counts = count_members(params.replicas, members, revisions.target)
    complete = rollout_complete(params, members, target_revision=revisions.target)
    current = revisions.target if complete else revisions.current
    fresh = [
        _ready_condition(params, counts, complete, now=now, generation=generation),
        condition(
            "Available",
            counts.ready >= min_ready(params),
            "MinimumReplicasAvailable" if counts.ready >= min_ready(params) else "MinimumReplicasUnavailable",
            f"{counts.ready} of {params.replicas} members Ready; at least {min_ready(params)} required",
            now=now,
            generation=generation,
        ),
        condition(
            "RolloutStalled",
            halt is not None,
            "ProgressDeadlineExceeded" if halt is not None else "Progressing",
            halt.message if halt is not None else "no member has missed the progress deadline",
            now=now,
            generation=generation,
        ),
        condition(
            "RolledBack",
            revisions.rolled_back,
            "RolledBack" if revisions.rolled_back else "NotRolledBack",
            (
                f"revision {revisions.template} stalled; the pool returned to revision {revisions.target}; "
                "change spec.template to roll out again"
            )
            if revisions.rolled_back
            else "the pool follows spec.template",
            now=now,
            generation=generation,
        ),
    ]
    status: dict[str, Any] = {
        "replicas": counts.active,
        "readyReplicas": counts.ready,
        "updatedReplicas": counts.updated,
        "outdatedReplicas": counts.outdated,
        "currentRevision": current,
        "updateRevision": revisions.target,
        "failedRevision": revisions.failed,
        "labelSelector": f"{POOL_LABEL}={pool_name}",
        "observedGeneration": generation,
        "conditions": merge_conditions((previous or {}).get("conditions"), fresh),
    }
    return status


def _ready_condition(
    params: RolloutParameters, counts: MemberCounts, complete: bool, *, now: datetime, generation: int | None
) -> dict[str, Any]:
    if complete:
        return condition(
            "Ready",
            True,
            "RolloutComplete",
            f"all {params.replicas} members are Ready and up to date",
            now=now,
            generation=generation,
        )
    if counts.outdated:
        reason, message = "RollingUpdate", f"{counts.outdated} outdated member(s) left to replace"
    elif counts.active != params.replicas:
        reason, message = "Scaling", f"{counts.active} member(s), {params.replicas} desired"
    else:
        reason, message = "MembersNotReady", f"{counts.ready} of {params.replicas} members Ready"
    return condition("Ready", False, reason, message, now=now, generation=generation)
