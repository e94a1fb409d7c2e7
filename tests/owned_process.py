"""An operator subprocess this test or benchmark started: wait until it is quiet, stop it, read its log.

The base of ``OperatorProcess`` (tests/integration/operator_harness.py) and of the Go anchor's
``AnchorProcess`` (bench/anchor_process.py), so a benchmark compares two operators waited for, and stopped,
the same way. Standard library only: the bench imports it before anything else of the tests is needed.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


class OwnedProcess:
    """What both kinds of operator process share; a subclass starts ``process``, counts ``reconciles()``."""

    what = "process"
    """How error messages name it."""

    process: subprocess.Popen[bytes] | None

    @property
    def log_path(self) -> Path:
        raise NotImplementedError

    def reconciles(self) -> int:
        """Finished reconciles (any outcome) since this process started."""
        raise NotImplementedError

    def not_settled(self, message: str) -> Exception:
        """The error :meth:`wait_quiet` raises (a subclass may name its own type)."""
        return AssertionError(message)

    def wait_quiet(self, minimum: int, quiet_s: float = 2.0, timeout_s: float = 60.0) -> int:
        """Wait until at least ``minimum`` reconciles finished and none happened for ``quiet_s``."""
        deadline = time.monotonic() + timeout_s
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            count = self.reconciles()
            if count != last:
                last, since = count, time.monotonic()
            elif count >= minimum and time.monotonic() - since >= quiet_s:
                return count
            time.sleep(0.2)
        raise self.not_settled(
            f"{self.what} did not settle: {last} reconciles (wanted >= {minimum}); {self.logs()}"
        )

    def stop(self) -> int:
        """SIGTERM our own PID and wait; SIGKILL only if it does not exit."""
        if self.process is None:
            return 0
        process, self.process = self.process, None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                return process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        return process.wait(timeout=10)

    def logs(self, limit: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return "<no log>"
