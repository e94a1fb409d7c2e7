"""kopf's per-object memory, made ephemeral: the operator registers ``kopf.on.event`` handlers only.

kopf keeps a ``ResourceMemory`` for every object it has ever seen (memo, error throttler, index and daemon
state, ~700 bytes and a timer each) until the object is deleted: at 1,000 VMs that is ~7,000 entries and
~5 MiB held for features this operator never uses — no daemons, timers, indexes, memos or change-detection
handlers (the store and the reconciler keep all state). Recalling every memory as *ephemeral* (kopf's own
mode for admission webhooks) gives each event a fresh, short-lived memory and keeps nothing.

Guarded: :func:`memories_for` returns kopf's normal container if the registry ever gains a handler kind
that needs memory, so adding a daemon later cannot silently break.
"""

from __future__ import annotations

from typing import Any

import kopf
from kopf._core.reactor.inventory import ResourceMemories, ResourceMemory


class EphemeralMemories(ResourceMemories):
    """A memory container that remembers nothing between events."""

    async def recall(
        self,
        raw_body: Any,
        *,
        memobase: Any = None,
        noticed_by_listing: bool = False,
        ephemeral: bool = False,
    ) -> ResourceMemory:
        """A fresh memory for this event only (never stored, so never needs forgetting)."""
        return await super().recall(
            raw_body, memobase=memobase, noticed_by_listing=noticed_by_listing, ephemeral=True
        )


def is_event_only(registry: kopf.OperatorRegistry) -> bool:
    """True when every resource handler is a watch-event handler: nothing needs kopf's per-object state."""
    return not (
        registry._spawning.get_all_handlers()  # daemons and timers
        or registry._changing.get_all_handlers()  # create/update/delete/resume handlers
        or registry._indexing.get_all_handlers()
    )


def memories_for(registry: kopf.OperatorRegistry) -> ResourceMemories:
    """Ephemeral memories when every resource handler is a watch-event handler, kopf's default otherwise."""
    return EphemeralMemories() if is_event_only(registry) else ResourceMemories()
