"""A de-duplicating keyed work queue with a bounded worker pool, and the per-key retry backoff.

Both controllers turn watch events into keys: a burst of events for one key costs one run of ``process``,
two workers never process the same key at once (an enqueue during a run marks the key dirty, so it runs
once more afterwards), and concurrency is capped by the number of workers. What a failure means (logs,
Events, how the retry is scheduled) stays with the caller; :class:`Backoff` only says how long to wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from uds_vm_operator.runtime.errors import ControllerError

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

    def idle(self) -> bool:
        """True when nothing is queued or running (benchmarks and tests wait for this)."""
        return not self._queued and not self._processing

    async def run(self) -> None:
        """Run the worker pool until cancelled."""
        tasks = [
            asyncio.create_task(self._worker(), name=f"{self._name}-worker-{i}") for i in range(self.workers)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

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

    An error marked ``retryable = False`` waits ``non_retryable_s`` instead: retrying soon cannot fix
    it, but the world (a Secret, a quota) may change without an event for the key.
    """

    def __init__(self, *, non_retryable_s: float) -> None:
        self._non_retryable_s = non_retryable_s
        self._failures: dict[K, int] = {}

    def failed(self, key: K, exc: Exception) -> float:
        """Count one more failure for ``key`` and return how long to wait before the retry."""
        retryable = getattr(exc, "retryable", True) if isinstance(exc, ControllerError) else True
        attempts = self._failures.get(key, 0) + 1
        self._failures[key] = attempts
        if not retryable:
            return self._non_retryable_s
        delay: float = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (attempts - 1))
        return delay

    def succeeded(self, key: K) -> None:
        """Forget ``key``'s failures, so its next error starts from the shortest delay again."""
        self._failures.pop(key, None)


__all__ = ["MAX_BACKOFF_S", "Backoff", "KeyedWorkQueue"]
