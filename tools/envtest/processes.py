"""Start, identify and stop the control-plane processes by recorded PID only.

A PID alone can be reused by an unrelated process after ours exits, so each record also keeps the kernel start
time (field 22 of /proc/<pid>/stat): we only ever signal a PID whose start time still matches. Zombies (exited
but not yet reaped, e.g. when PID 1 does not reap orphans) count as stopped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ProcessRecord:
    """Who we started: enough to find it again, and to refuse to signal a recycled PID."""

    name: str
    pid: int
    start_ticks: int
    argv0: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessRecord:
        return cls(str(data["name"]), int(data["pid"]), int(data["start_ticks"]), str(data["argv0"]))

    def is_alive(self) -> bool:
        """True while the very process we started runs (not a zombie, not a recycled PID)."""
        stat = _read_stat(self.pid)
        return stat is not None and stat[1] == self.start_ticks and stat[0] != "Z"


def _read_stat(pid: int) -> tuple[str, int] | None:
    """Return (state, start time in clock ticks) of a PID, or None when it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; everything after the last ')' is fixed.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def _die_with_parent() -> None:
    """preexec_fn: ask the kernel to SIGTERM the child if the launching thread dies (pytest killed hard)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    env: dict[str, str],
    *,
    tie_to_parent: bool,
    cwd: Path | None = None,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start argv in its own session with output to log_path; return the handle and its record.

    Own session: a Ctrl-C in the terminal that ran `make cluster-up` must not kill the background plane.
    tie_to_parent: used by the pytest fixture so a hard-killed test run cannot leak processes.
    cwd: where it runs (None: here); a ``python -m tools.…`` launcher needs the repository root.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if tie_to_parent else None,  # noqa: PLW1509 - no threads fork here
        )
    stat = _read_stat(process.pid)
    ticks = stat[1] if stat else -1
    return process, ProcessRecord(name, process.pid, ticks, argv[0])


def stop(
    records: Sequence[ProcessRecord],
    *,
    timeout_s: float = 15.0,
    reap: Callable[[int], None] | None = None,
) -> list[str]:
    """SIGTERM each live record in reverse start order, SIGKILL what is left after timeout_s.

    reap(pid) lets an owner that holds Popen handles collect exit statuses; without it we poll /proc.
    Returns the names that needed SIGKILL (for the log).
    """
    killed: list[str] = []
    for record in reversed(records):
        if not record.is_alive():
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGTERM)
        if not _wait_gone(record, timeout_s, reap):
            with contextlib.suppress(ProcessLookupError):
                if record.is_alive():
                    os.kill(record.pid, signal.SIGKILL)
                    killed.append(record.name)
            _wait_gone(record, 5.0, reap)
    return killed


def _wait_gone(record: ProcessRecord, timeout_s: float, reap: Callable[[int], None] | None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if reap is not None:
            reap(record.pid)
        if not record.is_alive():
            return True
        time.sleep(0.05)
    return not record.is_alive()
