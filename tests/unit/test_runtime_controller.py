"""The controller base both controllers stand on: retry with backoff, one error Event per message, Events."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from uds_vm_operator.metrics import OperatorMetrics
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.controller import Controller, ReconcileResult, micro_time, rfc3339
from uds_vm_operator.runtime.errors import KubeApiError, TerminalError

OWNER = {"metadata": {"name": "vm", "namespace": "ns", "uid": "u-1"}}


class EventSink:
    """Records the Events the base creates; ``fail`` makes every create raise."""

    def __init__(self, fail: bool = False) -> None:
        self.events: list[dict[str, Any]] = []
        self.fail = fail

    async def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        if self.fail:
            raise KubeApiError(403, "Forbidden", "events are forbidden", what="create Event")
        self.events.append(manifest)
        return manifest


class Flaky(Controller):
    """Fails ``failures`` times with the same message (``error``), then succeeds, asking for a re-check in
    ``requeue_after_s`` each time it succeeds."""

    kind = kube.UDS_VM
    subject = "vm"
    queue_name = "test"
    log = logging.getLogger("test.controller")

    def __init__(
        self, api: Any, failures: int, *, requeue_after_s: float | None = None, error: Exception | None = None
    ) -> None:
        super().__init__(
            api, OperatorMetrics(), workers=1, clock=lambda: datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
        )
        self.failures = failures
        self.requeue_after_s = requeue_after_s
        self.error = error or KubeApiError(500, "InternalError", "etcd is away", what="get")
        self.calls = 0
        self.successes: list[tuple[str, str]] = []

    async def reconcile(self, namespace: str, name: str) -> ReconcileResult:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        self.successes.append((namespace, name))
        return ReconcileResult(requeue_after_s=self.requeue_after_s)

    def error_subject(self, key: tuple[str, str]) -> dict[str, Any] | None:
        return OWNER


def drive(controller: Controller, until: Any, *, polls: int = 500) -> None:
    async def scenario() -> None:
        runner = asyncio.create_task(controller.run())
        controller.enqueue("ns", "vm")
        for _ in range(polls):
            if until():
                break
            await asyncio.sleep(0.01)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(scenario())


def test_a_failure_is_retried_with_backoff_and_reported_once_per_message() -> None:
    api = EventSink()
    controller = Flaky(api, failures=2)
    drive(controller, lambda: controller.successes)
    assert controller.calls == 3
    assert controller.successes == [("ns", "vm")]
    assert [(e["type"], e["reason"]) for e in api.events] == [("Warning", "ReconcileError")]
    assert api.events[0]["regarding"]["kind"] == "UDSVirtualMachine"
    assert api.events[0]["eventTime"] == "2026-01-02T03:04:05.000006Z"
    assert controller.metrics.reconcile_total.labels(status="error")._value.get() == 2


def test_an_event_that_cannot_be_written_never_fails_the_reconcile() -> None:
    controller = Flaky(EventSink(fail=True), failures=0)
    assert asyncio.run(controller.emit(OWNER, "Normal", "Created", "made")) is False
    drive(controller, lambda: controller.successes)
    assert controller.successes == [("ns", "vm")]


def test_no_delay_means_no_recheck() -> None:
    controller = Flaky(EventSink(), failures=0)

    async def scenario() -> int:
        controller.enqueue_after("ns", "vm", None)
        return controller._queue.pending_wakeups()

    assert asyncio.run(scenario()) == 0


def test_times_are_written_as_kubernetes_writes_them() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert rfc3339(moment) == "2026-01-02T03:04:05Z"
    assert micro_time(moment) == "2026-01-02T03:04:05.000006Z"


def test_a_returned_requeue_brings_the_object_back_without_an_event() -> None:
    controller = Flaky(EventSink(), failures=0, requeue_after_s=0.01)
    drive(controller, lambda: controller.calls >= 3)
    assert controller.calls >= 3  # reconciled again and again, each time because the result asked for it
    done = Flaky(EventSink(), failures=0)
    drive(done, lambda: False, polls=30)  # 0.3 s: a result that asks for nothing brings nothing more
    assert done.calls == 1


def test_a_terminal_error_waits_the_long_delay_and_a_transient_one_backs_off() -> None:
    async def first_retry_delay(error: Exception) -> float | None:
        controller = Flaky(EventSink(), failures=1, error=error)
        await controller._reconcile_with_retry(("ns", "vm"))
        return controller._queue.next_wakeup_in(("ns", "vm"))

    terminal = asyncio.run(first_retry_delay(TerminalError("the name is taken")))
    transient = asyncio.run(first_retry_delay(KubeApiError(409, "Conflict", "again", what="apply")))
    assert terminal is not None and terminal > 30.0  # MAX_BACKOFF_S: far beyond the first backoff
    assert transient is not None and transient <= 0.5


def test_the_earliest_requeue_asked_for_wins() -> None:
    result = ReconcileResult()
    result.requeue_after(None)
    assert result.requeue_after_s is None
    for delay in (30.0, 2.0, None, 60.0):
        result.requeue_after(delay)
    assert result.requeue_after_s == 2.0
