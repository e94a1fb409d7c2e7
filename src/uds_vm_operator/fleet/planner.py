"""The rollout planner: given the pool spec and its members, what to do next (pure).

Surge-first and readiness-gated, the rules a reviewer can check one by one:

1. A member of the target revision that reports ``phase: Failed``, or is still not Ready
   ``progressDeadlineSeconds`` after it was created, stalls the rollout: the plan is ``HaltRollout``
   (plus ``Rollback`` to the previous revision when ``rollbackOnFailure`` is on and there is one), and
   nothing is created or deleted.
2. Every ordinal in ``[0, replicas)`` that no member holds gets a new member of the target revision, as
   long as the pool holds fewer than ``replicas + maxSurge`` members (members being deleted count: their
   VMs still use the hosts until they are gone).
3. Outdated members in that range are replaced surge-first: extra members at the lowest free ordinals
   ``>= replicas`` are created ahead of the deletions, within the same ``replicas + maxSurge`` bound.
4. Deletions never take a Ready member below ``replicas - maxUnavailable`` Ready members: each Ready
   member deleted spends one unit of ``ready - (replicas - maxUnavailable)``. Members that are not Ready
   cost nothing. Outdated members go first, highest ordinal first; then members at ordinals
   ``>= replicas`` that are no longer needed as surge (again highest first), which is also scale-down.

Members being deleted are never counted Ready and keep their ordinal until they are gone, so a returning
ordinal never meets a half-deleted predecessor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from uds_vm_operator.api.pool import UDSVirtualMachinePoolSpec
from uds_vm_operator.fleet.actions import (
    Action,
    CreateMember,
    CreateReason,
    DeleteMember,
    DeleteReason,
    HaltRollout,
    Rollback,
)
from uds_vm_operator.fleet.members import MemberView


@dataclass(frozen=True)
class RolloutParameters:
    """The numbers of a pool spec the planner works with (resolved from percentages already)."""

    replicas: int
    max_surge: int
    max_unavailable: int
    progress_deadline_s: int
    rollback_on_failure: bool


def resolve_int_or_percent(value: int | str, replicas: int, *, round_up: bool) -> int:
    """Resolve ``3`` or ``"25%"`` against ``replicas`` (Deployment rules: surge up, unavailable down)."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if not text.endswith("%"):
        return int(text)
    scaled = int(text[:-1]) * replicas / 100
    return math.ceil(scaled) if round_up else math.floor(scaled)


def rollout_parameters(
    *,
    replicas: int,
    max_surge: int | str,
    max_unavailable: int | str,
    progress_deadline_s: int,
    rollback_on_failure: bool,
) -> RolloutParameters:
    """Resolve surge/unavailability; when both come out 0 the pool surges by one so it can still move."""
    surge = resolve_int_or_percent(max_surge, replicas, round_up=True)
    unavailable = resolve_int_or_percent(max_unavailable, replicas, round_up=False)
    if surge <= 0 and unavailable <= 0:
        surge = 1
    return RolloutParameters(
        replicas=replicas,
        max_surge=max(surge, 0),
        max_unavailable=max(unavailable, 0),
        progress_deadline_s=progress_deadline_s,
        rollback_on_failure=rollback_on_failure,
    )


def min_ready(params: RolloutParameters) -> int:
    """The Ready members the pool must keep while it changes."""
    return max(0, params.replicas - params.max_unavailable)


def stalled_member(
    params: RolloutParameters, members: Sequence[MemberView], *, target_revision: str, now: datetime
) -> HaltRollout | None:
    """The target-revision member that failed, or waited longest past the deadline without becoming Ready."""
    late: list[HaltRollout] = []
    for member in members:
        if member.deleting or member.ready or member.revision != target_revision:
            continue
        waited_s = (now - member.created_at).total_seconds()
        if member.failed or waited_s > params.progress_deadline_s:
            late.append(
                HaltRollout(
                    member=member.name,
                    revision=target_revision,
                    waited_s=max(0, int(waited_s)),
                    deadline_s=params.progress_deadline_s,
                    failed=member.failed,
                )
            )
    return min(late, key=lambda halt: (not halt.failed, -halt.waited_s, halt.member)) if late else None


def rollout_complete(
    params: RolloutParameters, members: Sequence[MemberView], *, target_revision: str
) -> bool:
    """True when exactly ordinals ``0..replicas-1`` exist, all Ready, all of the target revision."""
    if any(member.deleting for member in members):
        return False
    if sorted(member.ordinal for member in members) != list(range(params.replicas)):
        return False
    return all(member.ready and member.revision == target_revision for member in members)


def plan_rollout(
    params: RolloutParameters,
    members: Sequence[MemberView],
    *,
    target_revision: str,
    previous_revision: str | None,
    now: datetime,
) -> list[Action]:
    """Return the next actions for the pool; an empty list means there is nothing to do right now.

    ``previous_revision`` is the last revision the pool fully rolled out (``status.currentRevision``);
    it is where ``rollbackOnFailure`` returns to.
    """
    halt = stalled_member(params, members, target_revision=target_revision, now=now)
    if halt is not None:
        actions: list[Action] = [halt]
        if params.rollback_on_failure and previous_revision and previous_revision != target_revision:
            actions.append(Rollback(from_revision=target_revision, to_revision=previous_revision))
        return actions

    creations = _plan_creations(params, members, target_revision)
    deletions = _plan_deletions(params, members, target_revision)
    return [*creations, *deletions]


def _plan_creations(
    params: RolloutParameters, members: Sequence[MemberView], target_revision: str
) -> list[CreateMember]:
    replicas = params.replicas
    capacity = replicas + params.max_surge
    occupied = {member.ordinal for member in members}
    total = len(members)
    active = [member for member in members if not member.deleting]
    planned: list[CreateMember] = []
    any_outdated = any(member.revision != target_revision for member in active)

    for ordinal in range(replicas):
        if total >= capacity:
            return planned
        if ordinal not in occupied:
            reason: CreateReason = "Replace" if any_outdated else "ScaleUp"
            planned.append(CreateMember(ordinal=ordinal, revision=target_revision, reason=reason))
            occupied.add(ordinal)
            total += 1

    outdated_in_range = sum(
        1 for member in active if member.ordinal < replicas and member.revision != target_revision
    )
    spares = sum(1 for member in active if member.ordinal >= replicas and member.revision == target_revision)
    wanted = outdated_in_range - spares
    ordinal = replicas
    while wanted > 0 and total < capacity:
        while ordinal in occupied:
            ordinal += 1
        planned.append(CreateMember(ordinal=ordinal, revision=target_revision, reason="Surge"))
        occupied.add(ordinal)
        total += 1
        wanted -= 1
    return planned


def _plan_deletions(
    params: RolloutParameters, members: Sequence[MemberView], target_revision: str
) -> list[DeleteMember]:
    replicas = params.replicas
    active = [member for member in members if not member.deleting]
    budget = sum(1 for member in active if member.ready) - min_ready(params)
    planned: list[DeleteMember] = []

    def delete(member: MemberView, reason: DeleteReason) -> None:
        nonlocal budget
        if member.ready:
            if budget <= 0:
                return
            budget -= 1
        planned.append(
            DeleteMember(
                name=member.name,
                ordinal=member.ordinal,
                revision=member.revision,
                reason=reason,
                was_ready=member.ready,
            )
        )

    outdated = [member for member in active if member.revision != target_revision]
    # Members that are not Ready cost no availability: remove them first so the budget goes further.
    for member in sorted(outdated, key=lambda m: (m.ready, -m.ordinal)):
        delete(member, "ScaleDown" if member.ordinal >= replicas else "Outdated")

    by_ordinal = {member.ordinal: member for member in active}
    open_slots = sum(
        1
        for ordinal in range(replicas)
        if not (
            (holder := by_ordinal.get(ordinal)) is not None
            and holder.ready
            and holder.revision == target_revision
        )
    )
    extras = [
        member for member in active if member.ordinal >= replicas and member.revision == target_revision
    ]
    # Keep as many extras as slots are still open, but never more than the surge allows (they would block
    # the creation of the open slots); Ready ones and low ordinals first. The rest are surplus.
    keep = sorted(extras, key=lambda m: (not m.ready, m.ordinal))[: min(open_slots, params.max_surge)]
    surplus = [member for member in extras if member not in keep]
    rollout_running = bool(outdated) or open_slots > 0
    for member in sorted(surplus, key=lambda m: (m.ready, -m.ordinal)):
        delete(member, "SurgeDone" if rollout_running else "ScaleDown")
    return planned


def parameters_of(spec: UDSVirtualMachinePoolSpec) -> RolloutParameters:
    """The planner's numbers for a parsed pool spec."""
    rolling = spec.strategy.rolling_update
    return rollout_parameters(
        replicas=spec.replicas,
        max_surge=rolling.max_surge,
        max_unavailable=rolling.max_unavailable,
        progress_deadline_s=spec.progress_deadline_seconds,
        rollback_on_failure=spec.rollback_on_failure,
    )


def seconds_until_next_deadline(
    params: RolloutParameters, members: Sequence[MemberView], *, target_revision: str, now: datetime
) -> float | None:
    """How long until a waiting member would miss the progress deadline (None: nobody is waiting).

    Nothing changes in the cluster when a member simply stays un-Ready, so no watch event would wake the
    controller; it schedules its own re-check this far ahead.
    """
    waits = [
        params.progress_deadline_s - (now - member.created_at).total_seconds()
        for member in members
        if not member.deleting and not member.ready and member.revision == target_revision
    ]
    pending = [wait for wait in waits if wait >= 0]
    return min(pending) if pending else None
