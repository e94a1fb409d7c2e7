"""No diff-base for an operator without change-detection handlers.

On every event kopf builds the object's "essence" (a deep copy of everything but metadata and status) and
diffs it against the last-handled one, for ``on.create/update/field`` handlers. This operator registers
``kopf.on.event`` handlers only, so the copy is thrown away: it was ~7 % of the operator's CPU while 1,000
VMs converged. :class:`NoDiffBase` answers with an empty essence and stores nothing (kopf writes no
annotation either way: event handlers never persist a diff-base).

Guarded by :func:`.kopf_memory.is_event_only`: a registry with other handlers keeps kopf's own storage.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import kopf

from uds_vm_operator.controller.kopf_memory import is_event_only


class NoDiffBase(kopf.DiffBaseStorage):
    """A diff-base that is always empty and never stored."""

    def build(self, *, body: Any, extra_fields: Iterable[Any] | None = None) -> Any:
        """An empty essence: nothing here compares essences."""
        return cast(Any, {})

    def fetch(self, *, body: Any) -> Any:
        """Never a previous essence."""
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        """Nothing to keep."""
        return None


def use_no_diffbase_if_event_only(settings: kopf.OperatorSettings, registry: kopf.OperatorRegistry) -> bool:
    """Switch to :class:`NoDiffBase` when no handler compares states; True if switched."""
    if not is_event_only(registry):
        return False
    settings.persistence.diffbase_storage = NoDiffBase()
    return True
