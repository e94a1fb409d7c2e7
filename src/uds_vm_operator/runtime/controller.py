"""The base every controller shares: work queue, retry with backoff, the error Event, Events, metrics.

The reconcile contract (controller-runtime's ``reconcile.Result`` and ``TerminalError``, kopf's
Temporary/PermanentError): a subclass's :meth:`Controller.reconcile` handles one object, level-triggered, and
either *returns* a :class:`ReconcileResult` (done, or look again after a delay) or *raises*: a transient
error is retried with exponential backoff, a terminal one (``runtime.errors.TerminalError``) waits the
controller's long delay. A reconcile never requeues itself as a side effect. One hook, where a controller
has it: the object an error Event regards (:meth:`Controller.error_subject`). Everything else —
de-duplicating keys, one requeue mechanism, backoff per key, at most one Warning Event per distinct error,
best-effort Events that never fail a reconcile — is written once, here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from uds_vm_operator.metrics import OperatorMetrics
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.errors import ControllerError
from uds_vm_operator.runtime.events import build_event
from uds_vm_operator.runtime.timestamps import micro_time, rfc3339, utc_now
from uds_vm_operator.runtime.workqueue import MAX_BACKOFF_S, Backoff, KeyedWorkQueue

Key = tuple[str, str]
"""(namespace, name) of the object a controller reconciles."""


@dataclass
class ReconcileResult:
    """What every reconcile returns: done (``requeue_after_s`` None), or look again after a delay.

    Controllers subclass it with what their tests and benchmarks read (writes, members created…).
    """

    requeue_after_s: float | None = None
    """Reconcile this object again after this many seconds, even without an event (a deadline, a re-check)."""

    def requeue_after(self, delay_s: float | None) -> None:
        """Ask to look again in ``delay_s`` (``None``: no need); the earliest asked for wins."""
        if delay_s is not None and (self.requeue_after_s is None or delay_s < self.requeue_after_s):
            self.requeue_after_s = delay_s


class Controller:
    """Owns the work queue of one kind and runs :meth:`reconcile` for one key at a time per key.

    A subclass declares what differs between controllers as class attributes.
    """

    kind: kube.Kind
    """What the controller reconciles; its Events regard objects of this kind."""
    subject: str
    """The log field naming the object ("vm", "pool")."""
    queue_name: str
    """Names the worker tasks."""
    terminal_delay_s: float = MAX_BACKOFF_S
    """How long a terminal error (``runtime.errors.TerminalError``) waits before the next try."""
    record_reconcile_metrics: bool = True
    """Count outcomes and durations in ``reconcile_total`` / ``reconcile_duration_seconds``."""
    log: logging.Logger = logging.getLogger("uds_vm_operator.controller")

    def __init__(
        self,
        api: kube.KubeApi,
        metrics: OperatorMetrics,
        *,
        workers: int,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.workers = max(1, workers)
        self.clock = clock
        self._queue: KeyedWorkQueue[Key] = KeyedWorkQueue(
            self._reconcile_with_retry, workers=self.workers, name=self.queue_name
        )
        self._backoff: Backoff[Key] = Backoff(terminal_delay_s=self.terminal_delay_s)
        self._last_error: dict[Key, str] = {}

    # ------------------------------------------------------------------------------------------ queue

    def enqueue(self, namespace: str, name: str) -> None:
        """Ask for a reconcile of one object; duplicates collapse, a running reconcile runs again after."""
        self._queue.enqueue((namespace, name))

    def enqueue_after(self, namespace: str, name: str, delay_s: float | None) -> None:
        """Reconcile again in ``delay_s`` (``None``: no re-check); keeps the earliest pending wake-up."""
        if delay_s is not None:
            self._queue.enqueue_after((namespace, name), delay_s)

    def idle(self) -> bool:
        """True when nothing is queued or running (benchmarks and tests wait for this)."""
        return self._queue.idle()

    @property
    def completed(self) -> int:
        """Reconciles finished (any outcome): lets a health check or benchmark see progress."""
        return self._queue.completed

    async def run(self) -> None:
        """Run the worker pool until cancelled."""
        await self._queue.run()

    # ------------------------------------------------------------------------------------------ hooks

    async def reconcile(self, namespace: str, name: str) -> ReconcileResult:
        """Bring one object in line with its spec (the subclass's job): return when to look again, or
        raise a transient or a terminal error (see the module docstring)."""
        raise NotImplementedError

    def error_subject(self, key: Key) -> Mapping[str, Any] | None:
        """The object a failed reconcile's Warning Event regards (``None``: no Event)."""
        return None

    # ------------------------------------------------------------------------------------------ retry

    async def _reconcile_with_retry(self, key: Key) -> None:
        started = time.perf_counter()
        try:
            result = await self.reconcile(*key)
        except Exception as exc:  # the loop must survive anything one object can throw at it
            delay = self._backoff.failed(key, exc)
            if self.record_reconcile_metrics:
                self.metrics.reconcile_total.labels(status="error").inc()
            prefix = "" if self.subject == "vm" else f"{self.subject} "
            self.log.warning(
                f"{prefix}reconcile failed",
                extra={self.subject: f"{key[0]}/{key[1]}", "error": str(exc), "retry_in_s": delay},
                exc_info=not isinstance(exc, ControllerError),
            )
            await self._report_error(key, exc)
            self.enqueue_after(*key, delay)
        else:
            self._backoff.succeeded(key)
            self._last_error.pop(key, None)
            self.enqueue_after(*key, result.requeue_after_s)
        finally:
            if self.record_reconcile_metrics:
                self.metrics.reconcile_duration_seconds.observe(time.perf_counter() - started)

    async def _report_error(self, key: Key, exc: Exception) -> None:
        """One Warning Event per distinct error message, not one per retry."""
        message = str(exc)
        if self._last_error.get(key) == message:
            return
        self._last_error[key] = message
        owner = self.error_subject(key)
        if owner is None:
            return
        await self.emit(owner, "Warning", "ReconcileError", message)

    # ----------------------------------------------------------------------------------------- events

    async def emit(self, owner: Mapping[str, Any], event_type: str, reason: str, note: str) -> bool:
        """Record an Event regarding ``owner``; a failure is logged, never allowed to fail the reconcile."""
        event = build_event(
            {"apiVersion": self.kind.api_version, "kind": self.kind.kind, **owner},
            event_type=event_type,
            reason=reason,
            note=note,
            event_time=micro_time(self.clock()),
        )
        try:
            await self.api.create(event)
        except Exception as exc:
            meta = owner.get("metadata") or {}
            self.log.warning(
                "event not recorded",
                extra={self.subject: f"{meta.get('namespace')}/{meta.get('name')}", "error": str(exc)},
            )
            return False
        return True


__all__ = ["Controller", "Key", "ReconcileResult", "micro_time", "rfc3339", "utc_now"]
