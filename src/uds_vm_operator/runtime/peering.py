"""Peering of operator replicas: which replica reconciles, and how soon a standby replaces a dead leader.

What kopf does (``kopf/_core/engines/peering.py``, kopf 1.45): every replica writes ``{priority, lifetime,
lastseen}`` under its identity into the status of the peering object, and rewrites it
``lifetime - randint(5, 10)`` seconds later (at least every second). A replica pauses its watches while a
live peer has a higher priority, and **every** replica pauses while two live peers share a priority (a
tie never resolves by itself). A record is dead once ``lastseen + lifetime`` has passed: the others drop it
and re-evaluate. So a replica that stops cleanly is replaced at once (it removes its record on exit), and a
SIGKILLed one after what is left of its lifetime: between about 5 s and ``lifetime``.

What this module adds: a priority nobody else holds when none is given (identical replicas of one
Deployment would otherwise all sit at 0 and all pause), a lifetime shorter than kopf's 60 s, and a warning
when the peering object is missing (kopf then keeps the replica paused without a word at INFO).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import kopf

    from uds_vm_operator.runtime.kube import KubeApi

log = logging.getLogger("uds_vm_operator.peering")

DEFAULT_LIFETIME_S = 15
"""kopf refreshes a record 5-10 s before it expires whatever the lifetime, so a live leader has the same
safety margin at 15 s as at kopf's 60 s, while a killed one is replaced after at most 15 s."""
MIN_LIFETIME_S = 5
"""At 5 s kopf refreshes every second and a record is 4 s from expiry when rewritten: barely enough room
for a slow keep-alive PATCH and clock skew between nodes (the reader compares the writer's timestamp)."""
MAX_LIFETIME_S = 3600
TIE_BREAK_SPAN = 1_000_000
"""Automatic priorities of replicas started in the same second differ by a random draw from this many."""
_SENIORITY_EPOCH_S = 1_704_067_200  # 2024-01-01T00:00:00Z: keeps automatic priorities far inside 2**53


def automatic_priority(now_s: float | None = None) -> int:
    """A priority no other replica holds, and lower than that of every replica started before this one.

    Seniority first: a restarted replica joins as the standby instead of pre-empting the leader that took
    over from it, so leadership changes only when a leader goes away. A random tie-breaker for replicas
    started in the same second (one Deployment rollout): they share a priority with probability
    1 / ``TIE_BREAK_SPAN``. Every automatic priority is negative, so an explicit ``--priority 0`` or higher
    (a debugging session, say) outranks every replica that chose its own.
    """
    import secrets  # noqa: PLC0415 (hashlib and friends: only `run` pays for them)

    started_s = int(time.time() if now_s is None else now_s) - _SENIORITY_EPOCH_S
    return -started_s * TIE_BREAK_SPAN + secrets.randbelow(TIE_BREAK_SPAN)


def apply_peering_settings(
    settings: kopf.OperatorSettings,
    *,
    name: str | None,
    standalone: bool,
    priority: int | None,
    lifetime_s: int,
) -> int | None:
    """Write the peering options into ``settings``; returns the priority in force (``None`` standalone).

    ``name`` makes peering mandatory on that object (kopf stays paused until it exists); with neither a name
    nor ``standalone`` kopf peers through an object named ``default`` if there is one. Either way a missing
    ``priority`` is chosen by :func:`automatic_priority`, so identical replicas never tie.
    """
    if not MIN_LIFETIME_S <= lifetime_s <= MAX_LIFETIME_S:
        raise ValueError(f"peering lifetime {lifetime_s} s is outside {MIN_LIFETIME_S}-{MAX_LIFETIME_S} s")
    peering = settings.peering
    peering.standalone = standalone
    if standalone:
        return None
    if name is not None:
        peering.name = name
        peering.mandatory = True
    peering.lifetime = lifetime_s
    peering.priority = automatic_priority() if priority is None else priority
    log.info(
        "peering priority chosen" if priority is None else "peering priority given",
        extra={
            "peering": peering.name,
            "priority": peering.priority,
            "lifetime_s": lifetime_s,
            "mandatory": peering.mandatory,
        },
    )
    return peering.priority


async def warn_if_peering_object_missing(
    api: KubeApi, *, name: str | None, clusterwide: bool, namespaces: Sequence[str]
) -> list[str]:
    """Log a WARNING for each peering object ``--peering NAME`` needs but the cluster lacks; returns them.

    With mandatory peering kopf pauses until the object exists and says so only at DEBUG, so a missing
    object looks like an operator that silently ignores every VM. kopf resumes by itself once the object
    is created, so this warns instead of failing. Namespace globs are not checked; API errors are ignored
    (the check is advice, never a reason not to start).
    """
    if name is None:
        return []
    from uds_vm_operator.runtime import kube  # noqa: PLC0415 (keeps `uds-vm-operator --help` light)
    from uds_vm_operator.runtime.errors import KubeApiError, KubeUnreachableError  # noqa: PLC0415

    if clusterwide:
        kind = kube.CLUSTER_KOPF_PEERING
        places: list[str | None] = [None]
    else:
        kind = kube.KOPF_PEERING
        places = [ns for ns in namespaces if not any(glob in ns for glob in "*?[!")]
    missing: list[str] = []
    for namespace in places:
        try:
            found = await api.get(kind, namespace, name)
        except (KubeApiError, KubeUnreachableError) as exc:
            log.debug("peering object not checked", extra={"peering": name, "error": str(exc)})
            continue
        if found is None:
            where = f"{kind.kind} {namespace}/{name}" if namespace else f"{kind.kind} {name}"
            missing.append(where)
            log.warning(
                "peering object missing: this replica reconciles nothing until it exists",
                extra={
                    "peering": where,
                    "fix": f"kubectl apply -f - <<< '{{apiVersion: kopf.dev/v1, kind: {kind.kind}, "
                    f"metadata: {{name: {name}" + (f", namespace: {namespace}" if namespace else "") + "}}'",
                },
            )
    return missing
