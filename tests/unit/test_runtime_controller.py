"""The controller base both controllers stand on: retry with backoff, one error Event per message, Events."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from uds_vm_operator.metrics import OperatorMetrics
from uds_vm_operator.runtime import kube
from uds_vm_operator.runtime.controller import Controller, micro_time, rfc3339
from uds_vm_operator.runtime.errors import KubeApiError

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
    """Fails ``failures`` times with the same message, then succeeds."""

    kind = kube.UDS_VM
    subject = "vm"
    queue_name = "test"
    log = logging.getLogger("test.controller")

    def __init__(self, api: Any, failures: int) -> None:
        super().__init__(
            api, OperatorMetrics(), workers=1, clock=lambda: datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
        )
        self.failures = failures
        self.calls = 0
        self.successes: list[tuple[str, str]] = []

    async def reconcile(self, namespace: str, name: str) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise KubeApiError(500, "InternalError", "etcd is away", what="get")

    def error_subject(self, key: tuple[str, str]) -> dict[str, Any] | None:
        return OWNER

    def succeeded(self, key: tuple[str, str]) -> None:
        self.successes.append(key)


def drive(controller: Controller, until: Any) -> None:
    async def scenario() -> None:
        runner = asyncio.create_task(controller.run())
        controller.enqueue("ns", "vm")
        for _ in range(500):
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
