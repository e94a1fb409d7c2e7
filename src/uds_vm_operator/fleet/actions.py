"""The steps a pool reconcile can take; the planner returns them, the controller carries them out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CreateReason = Literal["ScaleUp", "Replace", "Surge"]
DeleteReason = Literal["ScaleDown", "Outdated", "SurgeDone"]


@dataclass(frozen=True)
class CreateMember:
    """Create member ``ordinal`` from the template of ``revision``."""

    ordinal: int
    revision: str
    reason: CreateReason


@dataclass(frozen=True)
class DeleteMember:
    """Delete a member (the controller waits for it to be gone before its ordinal is reused)."""

    name: str
    ordinal: int
    revision: str | None
    reason: DeleteReason
    was_ready: bool


@dataclass(frozen=True)
class HaltRollout:
    """A member of the target revision failed or missed the progress deadline: take no further step."""

    member: str
    revision: str
    waited_s: int
    deadline_s: int
    failed: bool = False

    @property
    def message(self) -> str:
        """One line for the condition and the Event, saying what happened and what to do."""
        if self.failed:
            return (
                f"member {self.member} of revision {self.revision} failed (status.phase Failed, see its "
                "conditions); the rollout is halted: fix the image or change spec.template"
            )
        return (
            f"member {self.member} of revision {self.revision} is not Ready after {self.waited_s}s "
            f"(progressDeadlineSeconds {self.deadline_s}); the rollout is halted: fix the member or change "
            "spec.template"
        )


@dataclass(frozen=True)
class Rollback:
    """Return the pool to ``to_revision`` because ``from_revision`` stalled (rollbackOnFailure)."""

    from_revision: str
    to_revision: str


Action = CreateMember | DeleteMember | HaltRollout | Rollback
