"""A de-duplicating keyed work queue with a bounded worker pool, and the per-key retry backoff.

Both controllers turn watch events into keys: a burst of events for one key costs one run of ``process``,
two workers never process the same key at once (an enqueue during a run marks the key dirty, so it runs
once more afterwards), and concurrency is capped by the number of workers.
:meth:`KeyedWorkQueue.enqueue_after` is the one requeue mechanism (retry backoff, the re-check of a
blocked VM, a pool's progress deadline): at most one pending wake-up per key, the earliest asked for.
What a failure means (logs, Events) stays with the caller (:mod:`.controller`); :class:`Backoff` only
says how long to wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from uds_vm_operator.runtime.errors import is_transient

K = TypeVar("K", bound=Hashable)

MAX_BACKOFF_S = 60.0
"""The longest wait before retrying an error that a retry may fix."""
FIRST_BACKOFF_S = 0.5


class KeyedWorkQueue(Generic[K]):
    """Run ``process(key)`` for enqueued keys on ``workers`` tasks, at most once per key at a time."""

    def __init__(self, process: Callable[[K], Awaitable[None]], *, workers: int, name: str) -> None:
        self._process = process
        self.workers = max(1, workers)
        self._name = name
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._wakeups: dict[K, asyncio.TimerHandle] = {}
        self.completed = 0
        """Runs of ``process`` finished (any outcome): lets a health check or benchmark see progress."""

    def enqueue(self, key: K) -> None:
        """Ask for a run for ``key``; duplicates while queued collapse, a running key runs again after."""
        if key in self._queued:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        self._queued.add(key)
        self._queue.put_nowait(key)

    def enqueue_after(self, key: K, delay_s: float) -> None:
        """Enqueue ``key`` in ``delay_s``; keeps only the earliest pending wake-up per key.

        A later request while an earlier one is pending changes nothing: the earlier run re-decides
        (level-triggered) and asks again if it still needs to.
        """
        loop = asyncio.get_running_loop()
        when = loop.time() + delay_s
        current = self._wakeups.get(key)
        if current is not None and not current.cancelled() and current.when() <= when:
            return
        if current is not None:
            current.cancel()
        self._wakeups[key] = loop.call_at(when, self._wake, key)

    def cancel_wakeup(self, key: K) -> None:
        """Drop ``key``'s pending wake-up, if any (the object is gone)."""
        handle = self._wakeups.pop(key, None)
        if handle is not None:
            handle.cancel()

    def pending_wakeups(self) -> int:
        """How many keys wait for a wake-up (tests and health read it)."""
        return len(self._wakeups)

    def next_wakeup_in(self, key: K) -> float | None:
        """Seconds until ``key``'s pending wake-up (``None``: none): what a retry or a re-check chose."""
        handle = self._wakeups.get(key)
        return None if handle is None else handle.when() - asyncio.get_running_loop().time()

    def _wake(self, key: K) -> None:
        self._wakeups.pop(key, None)
        self.enqueue(key)

    def idle(self) -> bool:
        """True when nothing is queued or running (benchmarks and tests wait for this)."""
        return not self._queued and not self._processing

    async def run(self) -> None:
        """Run the worker pool until cancelled; pending wake-ups die with it."""
        tasks = [
            asyncio.create_task(self._worker(), name=f"{self._name}-worker-{i}") for i in range(self.workers)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for handle in self._wakeups.values():
                handle.cancel()
            self._wakeups.clear()

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._processing.add(key)
            try:
                await self._process(key)
            finally:
                self._processing.discard(key)
                self.completed += 1
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.enqueue(key)


class Backoff(Generic[K]):
    """Per-key exponential retry delays (0.5 s, 1 s, 2 s … up to :data:`MAX_BACKOFF_S`).

    A terminal error (:func:`~uds_vm_operator.runtime.errors.is_transient` false) waits ``terminal_delay_s``
    instead: retrying soon cannot fix it, but the world (a Secret, a quota) may change without an event.
    """

    def __init__(self, *, terminal_delay_s: float) -> None:
        self._terminal_delay_s = terminal_delay_s
        self._failures: dict[K, int] = {}

    def failed(self, key: K, exc: Exception) -> float:
        """Count one more failure for ``key`` and return how long to wait before the retry."""
        attempts = self._failures.get(key, 0) + 1
        self._failures[key] = attempts
        if not is_transient(exc):
            return self._terminal_delay_s
        delay: float = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (attempts - 1))
        return delay

    def succeeded(self, key: K) -> None:
        """Forget ``key``'s failures, so its next error starts from the shortest delay again."""
        self._failures.pop(key, None)


__all__ = ["MAX_BACKOFF_S", "Backoff", "KeyedWorkQueue"]
