"""`make test` runs the node tier as two pytest processes on one node (tools/run_test_tiers.py): their order.

The node tier spends most of its time in software-emulated guest boots and the waits around them, one at a
time; two lanes on the same node halve that. They share the node's cluster-wide state, so three moments are
held in order by marker files in the folder UDS_NODE_LANES names (unset: one process, nothing waits):

- the first lane brings up the node, real CDI and the whole KubeVirt, then writes ``ready``; the second lane
  starts its tests on that node only then (it never starts or stops the node, CDI or KubeVirt);
- both lanes run real-CDI tests (tests/node/cdi) while CDI is up; the second writes ``cdi-released`` when its
  last one ends, and only then does the first remove CDI and write ``cdi-down``. The second lane's other
  tests wait for ``cdi-down``: they play CDI's import (a real cdi-controller would reconcile their
  DataVolumes) or use virt-api, which restarts when CDI's API goes; a test marked ``cdi_indifferent`` (it
  touches neither) runs at once;
- a test marked ``alone_on_the_node`` (it installs or removes something cluster-wide, or stops the node)
  runs in the first lane once the second has ended; so does the node's teardown.

run_test_tiers writes ``<lane>-ended`` when a lane's process ends, however it ends, so a lane that fails or
crashes never leaves the other waiting: a wait that finds the other lane ended fails at once, with the reason.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tools.run_test_tiers import LANE_ENV, LANES_ENV, ended_marker

FIRST, SECOND = "first", "second"
READY, CDI_RELEASED, CDI_DOWN = "ready", "cdi-released", "cdi-down"
WAIT_S = 3600.0
"""The longest a lane waits for the other: a whole tier's length (a test's own timeout fails it first)."""
POLL_S = 1.0


class LaneError(RuntimeError):
    """The other lane ended (or ran past WAIT_S) before it wrote what this lane waits for."""


def folder() -> Path | None:
    """The marker folder, or None when the tier runs as one process."""
    value = os.environ.get(LANES_ENV)
    return Path(value) if value else None


def lane() -> str | None:
    """``first``, ``second``, or None when the tier runs as one process."""
    if folder() is None:
        return None
    value = os.environ.get(LANE_ENV, "")
    if value not in (FIRST, SECOND):
        raise LaneError(f"{LANE_ENV}={value!r}: expected {FIRST!r} or {SECOND!r} beside {LANES_ENV}")
    return value


def marked(name: str) -> bool:
    """Whether marker ``name`` was written (False outside lanes)."""
    where = folder()
    return where is not None and (where / name).is_file()


def mark(name: str, content: str = "") -> None:
    """Write marker ``name`` (whole, by rename: a reader never sees half of it). No-op outside lanes."""
    where = folder()
    if where is None:
        return
    where.mkdir(parents=True, exist_ok=True)
    partial = where / f".{name}.partial"
    partial.write_text(content, encoding="utf-8")
    partial.rename(where / name)


def wait_for(
    name: str, *, other: str, why: str, ended_is_enough: bool = False, timeout_s: float = WAIT_S
) -> str:
    """Block until marker ``name`` exists and return its content; once lane ``other`` has ended without
    writing it (it never will), fail, or return "" with ``ended_is_enough`` (the wait was for the other lane
    to stop using something). No-op (returns "") outside lanes."""
    where = folder()
    if where is None:
        return ""
    target, ended = where / name, where / ended_marker(other)
    deadline = time.monotonic() + timeout_s
    while True:
        if target.is_file():
            return target.read_text(encoding="utf-8")
        if ended.is_file():
            if ended_is_enough:
                return ""
            raise LaneError(f"waiting for {why}: the {other} lane ended without writing {target}")
        if time.monotonic() > deadline:
            raise LaneError(f"waiting for {why}: {target} not written within {timeout_s:.0f} s")
        time.sleep(POLL_S)
