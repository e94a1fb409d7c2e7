"""A value read from the cluster at most once per interval, however many reconciles ask for it.

Cluster facts (what the installed CDI supports, whether a node offers KVM) change when an administrator
upgrades or adds something, not per VM; reading them on every reconcile would cost a GET per VM at fleet
scale. Concurrent callers share one fetch (the lock), so a cold start with a thousand queued VMs still makes
one request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class TtlCache(Generic[T]):
    """The result of ``fetch``, fetched again once it is ``ttl_s`` seconds old or invalidated."""

    def __init__(
        self,
        fetch: Callable[[], Awaitable[T]],
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self.ttl_s = ttl_s
        self._clock = clock
        # (value, when it was fetched), or None before the first fetch and after invalidate(): one piece of
        # state, so a value can never be taken for fresh without its time.
        self._entry: tuple[T, float] | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> T:
        """The cached value, refreshed when stale (one fetch even under concurrency)."""
        async with self._lock:
            now = self._clock()
            if self._entry is None or now - self._entry[1] >= self.ttl_s:
                self._entry = (await self._fetch(), now)
            return self._entry[0]

    def invalidate(self) -> None:
        """Forget the value, e.g. when an event shows the cluster changed; the next get() fetches."""
        self._entry = None
