"""The node tier's two lanes wait for each other through marker files (tests/node/lanes.py): a wait ends when
the marker is written, fails when the other lane has ended without it (or with it, if that is all it needed),
and nothing waits when the tier runs as one process."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.node import lanes


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(lanes.LANES_ENV, str(tmp_path))
    monkeypatch.setenv(lanes.LANE_ENV, lanes.SECOND)
    monkeypatch.setattr(lanes, "POLL_S", 0.01)
    return tmp_path


def test_one_process_has_no_lane_and_waits_for_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(lanes.LANES_ENV, raising=False)
    assert lanes.lane() is None
    assert lanes.wait_for(lanes.READY, other=lanes.FIRST, why="nothing", timeout_s=0) == ""
    lanes.mark(lanes.READY)  # a no-op, and no error
    assert not lanes.marked(lanes.READY)


def test_a_wait_ends_when_the_other_lane_writes_the_marker(folder: Path) -> None:
    assert lanes.lane() == lanes.SECOND
    writer = threading.Timer(0.2, lanes.mark, (lanes.READY, "/tmp/udsn-x"))
    writer.start()
    assert lanes.wait_for(lanes.READY, other=lanes.FIRST, why="the node", timeout_s=10) == "/tmp/udsn-x"
    assert lanes.marked(lanes.READY)
    assert not list(folder.glob(".*.partial")), "a marker is written whole, by rename"


def test_a_wait_fails_when_the_other_lane_ended_without_the_marker(folder: Path) -> None:
    (folder / lanes.ended_marker(lanes.FIRST)).write_text("1")
    with pytest.raises(lanes.LaneError, match=r"the first lane ended without writing .*cdi-down"):
        lanes.wait_for(lanes.CDI_DOWN, other=lanes.FIRST, why="CDI removed", timeout_s=10)
    assert lanes.wait_for(lanes.CDI_DOWN, other=lanes.FIRST, why="x", ended_is_enough=True) == ""


def test_a_wait_is_bounded(folder: Path) -> None:
    with pytest.raises(lanes.LaneError, match="not written within 0 s"):
        lanes.wait_for(lanes.CDI_RELEASED, other=lanes.SECOND, why="the second lane", timeout_s=0.05)


def test_a_lane_name_other_than_first_or_second_is_refused(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(lanes.LANE_ENV, "third")
    with pytest.raises(lanes.LaneError, match="expected 'first' or 'second'"):
        lanes.lane()
