"""tools/cpu_groups.py: the other tiers of `make test` run in one cgroup that weighs as one session, and
their CPU seconds are counted. On this machine's real cgroup v1 hierarchies (CI runs as root)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools import cpu_groups

BUSY = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


def test_a_process_started_in_the_group_is_in_it_its_cpu_is_counted_and_the_group_goes() -> None:
    name = f"uds-test-cpu-groups-{os.getpid()}"
    group = cpu_groups.make_group(name, 300)
    assert isinstance(group, cpu_groups.CpuGroup), group
    try:
        shares = [d / "cpu.shares" for d in group.directories if (d / "cpu.shares").exists()]
        assert [p.read_text().strip() for p in shares] == ["300"]
        done = subprocess.run(
            [sys.executable, "-c", BUSY + "print(open('/proc/self/cgroup').read())"],
            preexec_fn=group.join,
            capture_output=True,
            text=True,
            check=True,
        )
        placed = [line for line in done.stdout.splitlines() if line.endswith("/" + name)]
        assert len(placed) == len(cpu_groups.CONTROLLERS), done.stdout  # the cpu and the cpuacct line
        assert 0.25 <= group.cpu_seconds() < 5, group.cpu_seconds()  # the child's 0.3 s, after it ended
    finally:
        assert group.remove() == []
    assert not any(d.exists() for d in group.directories)


def test_a_group_with_a_process_in_it_is_named_not_hidden() -> None:
    group = cpu_groups.make_group(f"uds-test-cpu-groups-busy-{os.getpid()}", 512)
    assert isinstance(group, cpu_groups.CpuGroup), group
    sleeper = subprocess.Popen(["sleep", "30"], preexec_fn=group.join)  # noqa: PLW1509 (no threads)
    try:
        problems = group.remove()
        assert len(problems) == len(group.directories) and "busy" in problems[0].lower(), problems
    finally:
        sleeper.kill()
        sleeper.wait()
    assert group.remove() == []


def test_without_a_v1_hierarchy_it_says_why(tmp_path: Path) -> None:
    reason = cpu_groups.make_group("anything", 512, root=tmp_path)
    assert reason == f"no cgroup v1 'cpu' hierarchy at {tmp_path / 'cpu'}"


def test_the_machines_busy_seconds_leave_out_idle_and_iowait(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    tick = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal guest guest_nice (guest time is already in user)
    fields = [3, 1, 2, 50, 7, 0, 1, 0, 9, 0]
    stat.write_text("cpu  " + " ".join(str(f * tick) for f in fields) + "\ncpu0 1\n")
    assert cpu_groups.machine_busy_seconds(stat) == 7.0
