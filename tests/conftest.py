"""For every tier: with UDS_TIER_TIMES set (tools/run_test_tiers.py sets it), each test's setup, call and
teardown seconds are appended to that file under its tier's folder name, so `make test` can say at its end
how long each tier took inside the process it shared with others."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TIER_TIMES_ENV = "UDS_TIER_TIMES"
_TESTS = Path(__file__).resolve().parent


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    target = os.environ.get(TIER_TIMES_ENV)
    if not target:
        return
    try:
        parts = Path(str(report.fspath)).resolve().relative_to(_TESTS).parts
    except ValueError:
        parts = ()
    tier = parts[0] if len(parts) > 1 else "tests"
    try:
        with open(target, "a", encoding="utf-8") as times:
            times.write(f"{tier}\t{report.duration:.3f}\n")
    except OSError:  # an account of the run, never a reason for a test to fail
        pass
