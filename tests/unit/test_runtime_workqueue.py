"""The keyed work queue both controllers share: duplicates collapse, a key dirtied mid-run runs again."""

from __future__ import annotations

import asyncio

from uds_vm_operator.runtime.errors import KubeApiError
from uds_vm_operator.runtime.workqueue import MAX_BACKOFF_S, Backoff, KeyedWorkQueue


def test_duplicates_collapse_and_a_key_enqueued_while_running_runs_once_more() -> None:
    seen: list[str] = []

    async def scenario() -> None:
        gate = asyncio.Event()
        queue: KeyedWorkQueue[str]

        async def process(key: str) -> None:
            seen.append(key)
            if len(seen) == 1:
                queue.enqueue("a")  # dirtied while processing: must run again afterwards
                queue.enqueue("a")  # and only once more
                await gate.wait()

        queue = KeyedWorkQueue(process, workers=2, name="test")
        runner = asyncio.create_task(queue.run())
        queue.enqueue("a")
        queue.enqueue("a")
        queue.enqueue("b")
        await asyncio.sleep(0.05)
        assert not queue.idle()
        gate.set()
        for _ in range(100):
            if queue.idle():
                break
            await asyncio.sleep(0.01)
        assert queue.idle()
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(scenario())
    assert sorted(seen) == ["a", "a", "b"]


def test_backoff_doubles_to_a_ceiling_and_resets_on_success() -> None:
    backoff: Backoff[str] = Backoff(terminal_delay_s=300.0)
    delays = [backoff.failed("k", RuntimeError("boom")) for _ in range(10)]
    assert delays[:3] == [0.5, 1.0, 2.0]
    assert max(delays) == MAX_BACKOFF_S
    assert delays == sorted(delays)
    backoff.succeeded("k")
    assert backoff.failed("k", RuntimeError("boom")) == 0.5


def test_an_error_that_cannot_heal_waits_the_long_delay() -> None:
    backoff: Backoff[str] = Backoff(terminal_delay_s=300.0)
    invalid = KubeApiError(422, "Invalid", "spec.x: bad", what="apply DataVolume web-dv")
    assert backoff.failed("k", invalid) == 300.0
    conflict = KubeApiError(409, "Conflict", "try again", what="apply DataVolume web-dv")
    assert backoff.failed("j", conflict) == 0.5


def test_enqueue_after_keeps_the_earliest_wake_up_per_key() -> None:
    seen: list[str] = []

    async def scenario() -> None:
        async def process(key: str) -> None:
            seen.append(key)

        queue: KeyedWorkQueue[str] = KeyedWorkQueue(process, workers=1, name="test")
        runner = asyncio.create_task(queue.run())
        queue.enqueue_after("a", 30.0)
        queue.enqueue_after("a", 0.01)  # earlier: replaces the 30 s wake-up
        queue.enqueue_after("a", 60.0)  # later: changes nothing
        queue.enqueue_after("b", 30.0)
        queue.cancel_wakeup("b")
        assert queue.pending_wakeups() == 1
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        assert queue.pending_wakeups() == 0
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(scenario())
    assert seen == ["a"]
