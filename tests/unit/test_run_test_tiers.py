"""`make test` runs the tiers in two pytest processes at once (tools/run_test_tiers.py): every tier must be in
exactly one of them, and a failure in either must fail `make test` and be shown, with the other's results."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tools import run_test_tiers

ROOT = Path(__file__).resolve().parents[2]


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


def _collects(args: list[str], path: str) -> bool:
    """Whether pytest given `args` (paths and --ignore=PATH) collects the test file `path`."""
    ignored = [a.split("=", 1)[1] for a in args if a.startswith("--ignore=")]
    paths = [a for a in args if not a.startswith("-")]
    return any(_within(path, p) for p in paths) and not any(_within(path, i) for i in ignored)


def _test_files(under: str = "tests") -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / under).rglob("test_*.py"))


def test_every_test_file_runs_in_exactly_one_process() -> None:
    groups = run_test_tiers.GROUPS
    tiers = {path.split("/")[1] for path in _test_files()}
    assert {"node", "unit", "integration", "guest", "build"} <= tiers, tiers  # the premise
    for path in _test_files():
        assert sum(_collects(args, path) for args in groups.values()) == 1, path
    for path in run_test_tiers.SECOND_NODE_LANE:
        assert (ROOT / path).is_file(), f"SECOND_NODE_LANE names {path}, which is no test file"


def _module_marks(path: str) -> set[str]:
    text = (ROOT / path).read_text(encoding="utf-8")
    return {
        name
        for name in ("alone_on_the_node", "cdi_indifferent")
        if f"pytestmark = pytest.mark.{name}" in text
    }


def test_the_node_lanes_split_the_tier_as_their_order_needs() -> None:
    """tests/node/lanes.py's order holds only if each lane has what it waits for: the first lane the tests
    that change the whole node and some real-CDI tests (it installs and removes CDI), the second only tests
    it may run on someone else's node."""
    groups, lanes = run_test_tiers.GROUPS, run_test_tiers.NODE_LANES
    assert sorted(lanes.values()) == ["first", "second"]
    first, second = (next(g for g, lane in lanes.items() if lane == which) for which in ("first", "second"))
    node_files = _test_files("tests/node")
    alone = [p for p in node_files if "alone_on_the_node" in _module_marks(p)]
    assert {Path(p).name for p in alone} >= {"test_zy_demo.py", "test_zz_node_lifecycle.py"}, alone
    assert all(_collects(groups[first], p) for p in alone), alone
    assert any(_collects(groups[first], p) for p in _test_files("tests/node/cdi"))
    assert any(_collects(groups[second], p) for p in _test_files("tests/node/cdi"))
    assert all(_within(p, "tests/node") for p in groups[second])


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


def test_the_run_ends_with_each_tiers_seconds_and_its_boots_by_guest_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each process appends its tests' seconds under their tier (the hook of tests/conftest.py, copied into
    the temporary tree as its own conftest) and the end of the run sums them per tier."""
    hook = (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
    (tmp_path / "conftest.py").write_text(hook)
    for tier, pause in (("slow", 1.0), ("quick", 0.0)):
        (tmp_path / tier).mkdir()
        (tmp_path / tier / f"test_{tier}.py").write_text(
            f"import time\ndef test_one():\n    time.sleep({pause})\n"
            f"def test_two():\n    time.sleep({pause})\n"
        )
    groups = {"slow": [str(tmp_path / "slow")], "quick": [str(tmp_path / "quick")]}
    assert run_test_tiers.run_all(groups, ["-p", "no:cacheprovider"], tmp_path / "logs", cwd=tmp_path) == 0
    out = capsys.readouterr().out
    totals = run_test_tiers.tier_seconds(tmp_path / "logs" / "tier-times.tsv")
    assert list(totals) == ["slow", "quick"] and totals["slow"] >= 2.0 > totals["quick"], totals
    assert re.search(r"make test: tiers \(their tests' seconds\): slow 0\.\d min, quick 0\.0 min", out), out
    assert "make test: guest boots by kind: " in out


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


def test_a_node_lane_runs_with_its_lane_in_its_environment_and_its_end_is_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t/test_env.py").write_text(
        "import os\n"
        "from pathlib import Path\n"
        "def test_the_lane_is_named():\n"
        f"    assert os.environ['{run_test_tiers.LANE_ENV}'] == 'second'\n"
        f"    folder = Path(os.environ['{run_test_tiers.LANES_ENV}'])\n"
        "    assert folder.is_dir() and not (folder / 'second-ended').exists()\n"
    )
    (tmp_path / "u").mkdir()
    (tmp_path / "u/test_plain.py").write_text(
        f"import os\ndef test_no_lane():\n    assert '{run_test_tiers.LANE_ENV}' not in os.environ\n"
    )
    groups = {"lane": [str(tmp_path / "t")], "plain": [str(tmp_path / "u")]}
    status = run_test_tiers.run_all(
        groups, ["-p", "no:cacheprovider"], tmp_path / "logs", cwd=tmp_path, node_lanes={"lane": "second"}
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert (tmp_path / "logs/node-lanes/second-ended").read_text() == "0"


def test_the_node_tier_starts_at_once_and_the_checks_run_before_the_other_tiers() -> None:
    assert "node" not in run_test_tiers.BEFORE
    (checks,) = run_test_tiers.BEFORE["the other tiers"]
    assert "test-checks" in checks and "other-tier-builds" in checks
    makefile = (ROOT / "Makefile").read_text()
    assert "-m tools.run_test_tiers" in makefile
    recipe = makefile.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    assert "test-checks" not in recipe and "node-tier-builds" in recipe, recipe
