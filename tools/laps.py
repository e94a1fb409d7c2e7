"""Named laps of a stopwatch, for teardown lines that say which step was slow ("VM stopped 9 s, CRDs 3 s")."""

from __future__ import annotations

import time


class Laps:
    """The seconds between marks, each named by what ended at it."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self._steps: list[str] = []

    def lap(self, what: str) -> None:
        """Close the step that ends now, under ``what``."""
        now = time.monotonic()
        self._steps.append(f"{what} {now - self._last:.0f} s")
        self._last = now

    def summary(self) -> str:
        """Every step so far, in order, for one log line."""
        return ", ".join(self._steps)
