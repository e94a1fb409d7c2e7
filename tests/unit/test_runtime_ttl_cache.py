"""The cluster facts cache: one GET per interval however many reconciles ask, and a fresh GET once the
cluster is known to have changed (invalidate) or the interval has passed."""

from __future__ import annotations

import asyncio

from uds_vm_operator.runtime.ttl_cache import TtlCache


class Source:
    """A fetch that counts its calls and yields to the loop, so concurrent callers really overlap."""

    def __init__(self) -> None:
        self.calls = 0

    async def fetch(self) -> int:
        self.calls += 1
        await asyncio.sleep(0)
        return self.calls


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_thousand_concurrent_callers_share_one_fetch() -> None:
    source = Source()
    cache = TtlCache(source.fetch, ttl_s=30.0)

    async def many() -> list[int]:
        return await asyncio.gather(*(cache.get() for _ in range(1000)))

    assert set(asyncio.run(many())) == {1}
    assert source.calls == 1


def test_a_value_is_fetched_again_only_once_it_is_stale() -> None:
    source, clock = Source(), Clock()
    cache = TtlCache(source.fetch, ttl_s=30.0, clock=clock)
    assert asyncio.run(cache.get()) == 1
    clock.now += 29.9
    assert asyncio.run(cache.get()) == 1, "still fresh"
    clock.now += 0.1
    assert asyncio.run(cache.get()) == 2, "30 s old: fetched again"


def test_invalidate_forces_the_next_get_to_fetch() -> None:
    source, clock = Source(), Clock()
    cache = TtlCache(source.fetch, ttl_s=30.0, clock=clock)
    assert asyncio.run(cache.get()) == 1
    cache.invalidate()
    assert asyncio.run(cache.get()) == 2
    assert asyncio.run(cache.get()) == 2


def test_a_falsy_value_is_cached_like_any_other() -> None:
    calls = []

    async def nothing() -> None:
        calls.append(1)

    cache: TtlCache[None] = TtlCache(nothing, ttl_s=30.0)
    asyncio.run(cache.get())
    asyncio.run(cache.get())
    assert len(calls) == 1, "None is a value, not 'not fetched yet'"
