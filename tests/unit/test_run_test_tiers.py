"""`make test` runs the tiers in two pytest processes at once (tools/run_test_tiers.py): every tier must be in
exactly one of them, and a failure in either must fail `make test` and be shown, with the other's results."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tools import run_test_tiers

ROOT = Path(__file__).resolve().parents[2]


def _covers(args: list[str], tier: str) -> bool:
    """Whether pytest given `args` (paths and --ignore=PATH) collects the tier folder `tests/<tier>`."""
    ignored = {a.split("=", 1)[1] for a in args if a.startswith("--ignore=")}
    paths = [a for a in args if not a.startswith("-")]
    folder = f"tests/{tier}"
    return folder not in ignored and any(folder == p or folder.startswith(p + "/") for p in paths)


def test_every_tier_runs_in_exactly_one_process() -> None:
    groups = run_test_tiers.GROUPS
    tiers = sorted(p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    assert {"node", "unit", "integration", "guest", "build"} <= set(tiers), tiers  # the premise
    for tier in tiers:
        assert sum(_covers(args, tier) for args in groups.values()) == 1, tier


def test_a_failure_in_either_process_fails_the_run_and_both_logs_are_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "good").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "good/test_good.py").write_text("def test_fine():\n    assert True\n")
    (tmp_path / "bad/test_bad.py").write_text("def test_broken():\n    assert 1 == 2, 'the failure'\n")
    groups = {"good one": [str(tmp_path / "good")], "bad one": [str(tmp_path / "bad")]}
    status = run_test_tiers.run_all(groups, ["-p", "no:cacheprovider"], tmp_path / "logs", cwd=tmp_path)
    out = capsys.readouterr().out
    assert status != 0
    assert "===== good one: passed" in out and "1 passed" in out
    assert "===== bad one: FAILED" in out and "the failure" in out and "1 failed" in out


def test_both_passing_is_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"test_{name}.py").write_text("def test_fine():\n    assert True\n")
    groups = {"a": [str(tmp_path / "a")], "b": [str(tmp_path / "b")]}
    assert run_test_tiers.run_all(groups, ["-p", "no:cacheprovider"], tmp_path / "logs", cwd=tmp_path) == 0
    assert capsys.readouterr().out.count("passed after") == 2


def test_a_one_session_group_runs_in_its_cgroup_is_counted_and_the_cgroup_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "low").mkdir()
    (tmp_path / "low/test_low.py").write_text(
        "import os\n"
        "def test_in_the_group():\n"
        f"    assert '/uds-test-tiers-{os.getpid()}-low-one' in open('/proc/self/cgroup').read()\n"
    )
    groups = {"low one": [str(tmp_path / "low")]}
    args = ["-p", "no:cacheprovider"]
    status = run_test_tiers.run_all(
        groups, args, tmp_path / "logs", cwd=tmp_path, one_session=frozenset(groups)
    )
    out = capsys.readouterr().out
    assert status == 0, out
    shares = run_test_tiers.SESSION_SHARES
    counted = rf"CPU: the machine was busy \d+ CPU-s .*; low one \d+ CPU-s \(cpu.shares {shares}\)"
    assert re.search(counted, out), out
    assert "left behind" not in out
    assert not list(Path("/sys/fs/cgroup/cpu").glob(f"uds-test-tiers-{os.getpid()}-*"))


def test_commands_before_a_group_run_first_in_its_log_and_a_failed_one_fails_the_run_but_not_the_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t/test_after.py").write_text(
        "from pathlib import Path\n"
        "def test_runs_after_the_commands():\n"
        "    assert Path('first.done').read_text() == 'yes'\n"
    )
    before = {
        "lane": [
            ["sh", "-c", "echo 'the check that fails'; exit 3"],
            ["sh", "-c", "printf yes > first.done"],
        ]
    }
    status = run_test_tiers.run_all(
        {"lane": [str(tmp_path / "t")]},
        ["-p", "no:cacheprovider"],
        tmp_path / "logs",
        cwd=tmp_path,
        before=before,
    )
    out = capsys.readouterr().out
    assert status == 3, out
    assert "===== lane: FAILED (exit 3)" in out, out
    assert out.index("the check that fails") < out.index("1 passed"), out
    assert "make test: lane: exit 3:" in out


def test_the_node_tier_starts_at_once_and_the_checks_run_before_the_other_tiers() -> None:
    assert "node" not in run_test_tiers.BEFORE
    (checks,) = run_test_tiers.BEFORE["the other tiers"]
    assert "test-checks" in checks and "other-tier-builds" in checks
    makefile = (ROOT / "Makefile").read_text()
    assert "-m tools.run_test_tiers" in makefile
    recipe = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    assert "test-checks" not in recipe and "node-tier-builds" in recipe, recipe
