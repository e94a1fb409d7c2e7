"""Driving an operator subprocess that this test or benchmark started itself: settle, stop, read its log.

Shared by ``OperatorProcess`` (tests/integration/operator_harness.py) and the Go anchor's ``AnchorProcess``
(bench/anchor_process.py), so a benchmark compares two operators waited for, and stopped, the same way.
Standard library only: the bench imports it before anything else of the tests is needed.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def wait_until_quiet(
    reconciles: Callable[[], int],
    minimum: int,
    quiet_s: float,
    timeout_s: float,
    unsettled: Callable[[int], Exception],
) -> int:
    """Wait until ``reconciles()`` is at least ``minimum`` and has not moved for ``quiet_s``; return it.

    On timeout raise ``unsettled(last count seen)``, so each caller keeps its own error type and message.
    """
    deadline = time.monotonic() + timeout_s
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        count = reconciles()
        if count != last:
            last, since = count, time.monotonic()
        elif count >= minimum and time.monotonic() - since >= quiet_s:
            return count
        time.sleep(0.2)
    raise unsettled(last)


def stop_own(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM our own PID and wait; SIGKILL only if it does not exit. Returns its exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait(timeout=10)


def log_tail(path: Path, limit: int = 6000) -> str:
    """The last ``limit`` characters of a process's log, for an error message (``<no log>`` if none)."""
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return "<no log>"
