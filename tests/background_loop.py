"""A bounded background loop for tests that play a component (CDI, KubeVirt, virt-handler) beside the real
operator: the test's `with` block bounds it, and anything it raises fails the test when the block ends."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Self


class BackgroundLoop:
    """Calls `tick()` every `interval_s` on its own thread while the `with` block runs.

    `thread_started()` / `thread_ended()` run on that thread, for what must live there (an HTTP client).
    """

    name = "background-loop"
    interval_s = 0.5

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}")

    def tick(self) -> None:
        """One round of playing; subclasses say what."""
        raise NotImplementedError

    def thread_started(self) -> None:
        """Runs first on the loop's thread."""

    def thread_ended(self) -> None:
        """Runs last on the loop's thread, also after an error."""

    def _run(self) -> None:
        try:
            self.thread_started()
            while not self._stop.is_set():
                self.tick()
                self._stop.wait(self.interval_s)
        except BaseException as error:  # reported by __exit__
            self.error = error
        finally:
            self.thread_ended()
