"""Every contact with kopf's internals, in one module, checked against the kopf versions it is tested on.

The operator registers ``kopf.on.event`` handlers only: the work queue, the object store and the
controllers keep all state. Two of kopf's per-object features are therefore pure cost, and both are
replaced here, guarded so that a registry which gains another handler kind keeps kopf's own behaviour:

- **memory**: kopf keeps a ``ResourceMemory`` for every object it has ever seen (memo, error throttler,
  index and daemon state, ~700 bytes and a timer each) until the object is deleted: at 1,000 VMs that is
  ~7,000 entries and ~5 MiB. :class:`EphemeralMemories` recalls every memory as *ephemeral* (kopf's own
  mode for admission webhooks), so each event gets a fresh, short-lived memory and nothing is kept.
- **diff-base**: on every event kopf deep-copies the object's "essence" to diff it for
  ``on.create/update/field`` handlers; here the copy was thrown away (~7 % of the operator's CPU while
  1,000 VMs converged). :class:`NoDiffBase` answers with an empty essence and stores nothing (event
  handlers never persist a diff-base, so kopf writes no annotation either way).

Both reach below kopf's public API (``kopf._core.reactor.inventory``, the registry's private handler
lists), which kopf may change in any minor release. :func:`check_kopf_version` therefore refuses to start
on a kopf series this module was not tested on, with a message that says what to install.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import kopf
from kopf._core.reactor.inventory import ResourceMemories, ResourceMemory

from uds_vm_operator.runtime.errors import ControllerError

TESTED_KOPF_SERIES = ("1.45",)
"""kopf ``major.minor`` series the internals below are tested on (the floor 1.45.0 and the lock's 1.45.x)."""


class UnsupportedKopfError(ControllerError):
    """The installed kopf is not one this module was tested on."""


def check_kopf_version(version: str | None = None) -> str:
    """Return the installed kopf version; raise :class:`UnsupportedKopfError` for an untested series.

    Called once at start-up, before any kopf internal is touched, so an upgrade that moved one fails
    loudly with the fix instead of misbehaving at fleet scale.
    """
    found = version if version is not None else installed_kopf_version()
    series = ".".join(found.split(".")[:2])
    if series not in TESTED_KOPF_SERIES:
        tested = ", ".join(f"{s}.x" for s in TESTED_KOPF_SERIES)
        raise UnsupportedKopfError(
            f"kopf {found} is installed but the operator's kopf integration is tested on {tested} only; "
            f"install a tested kopf (pip install 'kopf=={TESTED_KOPF_SERIES[-1]}.*') or test "
            "uds_vm_operator.runtime.kopf_integration on this one and add its series"
        )
    return found


def installed_kopf_version() -> str:
    """kopf's own ``__version__`` (its wheel writes it); package metadata only when that is missing.

    Reading the metadata imports ``importlib.metadata`` (with ``email``, ``zipfile`` and ``csv``): ~5 ms of
    every start that kopf has already spent.
    """
    known = getattr(kopf, "__version__", None)
    if isinstance(known, str) and known:
        return known
    import importlib.metadata  # noqa: PLC0415

    return importlib.metadata.version("kopf")


def set_stop_flag_on_cleanup(registry: kopf.OperatorRegistry, stop_flag: Any) -> None:
    """Set ``stop_flag`` in kopf's cleanup activity, so a SIGTERM'd operator exits at once, not after 5 s.

    kopf 1.45 waits on the stop flag in a task of its own ("stop-flag waiter") that a signal never ends;
    after the root tasks stop, kopf gives such leftover tasks 5 s before it cancels them. Setting the flag
    in the cleanup activity (which runs once every root task is done) lets that task finish by itself.
    """

    @kopf.on.cleanup(registry=registry, id="release-stop-flag-waiter")
    async def release_stop_flag_waiter(**_: Any) -> None:
        stop_flag.set()


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
