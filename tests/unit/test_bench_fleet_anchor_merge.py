"""A subset run of the fleet bench keeps what earlier runs measured (``bench/fleet_anchor.py``).

The full run takes hours on the shared machine, so sections are measured on separate occasions; each run
must replace only what it measured, and say which run gave each figure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import fleet_anchor


def test_a_pools_run_keeps_the_earlier_fleet_and_startup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    partial = tmp_path / "fleet_anchor.partial.json"
    monkeypatch.setattr(fleet_anchor, "PARTIAL", partial)
    partial.write_text(
        json.dumps(
            {
                "sizes": [1000, 5000],
                "fleet": {"1000": {"floor": 1}, "5000": {"floor": 5}},
                "startup": {"median_s": {"ours_warm": 0.8}, "measured_at": "earlier", "commit": "abc"},
            }
        )
    )

    fleet_anchor._save_partial({"sizes": [1000], "fleet": {"1000": {"floor": 2}}, "pools": {"roll_s": 9}})

    saved = json.loads(partial.read_text())
    assert saved["fleet"]["5000"] == {"floor": 5}  # not measured again: kept
    assert saved["fleet"]["1000"]["floor"] == 2  # measured again: replaced
    assert saved["sizes"] == [1000, 5000]
    assert saved["startup"]["measured_at"] == "earlier"
    assert saved["pools"]["roll_s"] == 9
    assert saved["pools"]["measured_at"] != "earlier" and saved["pools"]["commit"]


def test_an_unreadable_partial_file_is_replaced_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    partial = tmp_path / "fleet_anchor.partial.json"
    monkeypatch.setattr(fleet_anchor, "PARTIAL", partial)
    partial.write_text("{ truncated")

    fleet_anchor._save_partial({"pools": {"roll_s": 9}})

    saved = json.loads(partial.read_text())
    assert saved["pools"]["roll_s"] == 9
    assert "fleet" not in saved
