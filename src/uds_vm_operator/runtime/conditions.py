"""The one condition type of every controller, and the one place a transition time is stamped.

A decision (SI-7 verification, the KVM guard, CDI's import-source check, the UDS Package sync, a pool's
rollout) returns :class:`Condition` values; only the publish step turns them into the
``metav1.Condition``-shaped dicts stored in status, through :func:`stamp`. That keeps each decision pure
(no clock) and keeps the rule that makes a resync write nothing — a condition whose status did not
change keeps its ``lastTransitionTime`` — in exactly one function, :func:`transition_time`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

TRUE = "True"
FALSE = "False"
UNKNOWN = "Unknown"


class Condition(NamedTuple):
    """What one condition says: ``status`` (True/False/Unknown), a CamelCase reason, a sentence."""

    status: str
    reason: str
    message: str

    @property
    def is_true(self) -> bool:
        """True when the condition holds."""
        return self.status == TRUE

    @property
    def is_false(self) -> bool:
        """True when the condition is known not to hold (``Unknown`` is neither true nor false)."""
        return self.status == FALSE


def transition_time(status: str, previous: Mapping[str, Any] | None, now: str) -> str:
    """``previous``'s ``lastTransitionTime`` while the status stays the same, else ``now``."""
    if previous is not None and previous.get("status") == status and previous.get("lastTransitionTime"):
        return str(previous["lastTransitionTime"])
    return now


def stamp(
    type_: str,
    condition: Condition,
    previous: Mapping[str, Any] | None,
    *,
    now: str,
    generation: int | None,
) -> dict[str, Any]:
    """The stored form of one condition (``observedGeneration`` only when ``generation`` is given)."""
    status, reason, message = condition
    entry: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition_time(status, previous, now),
    }
    if generation is not None:
        entry["observedGeneration"] = generation
    return entry


def by_type(conditions: Sequence[Any] | None) -> dict[str, Mapping[str, Any]]:
    """Stored conditions keyed by type; anything that is not a condition-shaped mapping is ignored."""
    return {str(c["type"]): c for c in conditions or [] if isinstance(c, Mapping) and "type" in c}
