"""A CPU weight and CPU accounting for one of `make test`'s pytest processes (cgroup v1 `cpu` and `cpuacct`).

Why a weight: the node tier is the run's critical path (its guests boot one after another under software
emulation, each on one core), while the other tiers only have to end before it. Linux's autogroup gives every
session an equal share of the CPU, and each control plane and QEMU guest the other tiers start is a session of
its own, so together they outweighed the node's booting guest several times over. In one cgroup they weigh
as one session: they still get every cycle the node tier leaves idle, but a guest booting on the node is no
longer outvoted. A weight, not a limit: nothing is throttled on an idle machine.

Why accounting: the run's CPU seconds per process say where the 2 cores went (`cpuacct.usage`), which a
wall-clock time cannot.

Without cgroup v1 (a cgroup v2-only machine) nothing is weighted and the reason is said; the run is the same.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct")
SESSION_SHARES = 1024
"""The weight of one session (autogroup), for all the group's sessions together; the node's pods together
weigh 2048 (the kubelet's `kubepods`). Not lower: the other tiers have bounded waits of their own."""


@dataclass(frozen=True)
class CpuGroup:
    """One cgroup made in each v1 hierarchy of CONTROLLERS (one directory when they are mounted together)."""

    directories: tuple[Path, ...]

    def join(self) -> None:
        """Move the calling process into the group: run in the child between fork and exec, so everything
        it starts is in the group from its first instruction."""
        for directory in self.directories:
            (directory / "cgroup.procs").write_text(str(os.getpid()))

    def cpu_seconds(self) -> float:
        """CPU time the group's processes used so far, those that ended included."""
        for directory in self.directories:
            usage = directory / "cpuacct.usage"
            if usage.exists():
                return int(usage.read_text()) / 1e9
        return 0.0

    def remove(self) -> list[str]:
        """Remove the group's directories; a directory that cannot go (a process of ours still in it) is
        named, not hidden."""
        problems = []
        for directory in self.directories:
            try:
                directory.rmdir()
            except OSError as error:
                problems.append(f"{directory}: {error.strerror}")
        return problems


def make_group(name: str, shares: int, root: Path = CGROUP_ROOT) -> CpuGroup | str:
    """The group ``name`` with ``shares``, or why none can be made here (no v1 hierarchy, not root)."""
    directories: list[Path] = []
    for controller in CONTROLLERS:
        hierarchy = root / controller
        if not (hierarchy / "cgroup.procs").exists():
            return f"no cgroup v1 '{controller}' hierarchy at {hierarchy}"
        directory = (hierarchy / name).resolve()
        if directory in directories:
            continue  # cpu and cpuacct mounted together
        try:
            directory.mkdir(exist_ok=True)
        except OSError as error:
            CpuGroup(tuple(directories)).remove()
            return f"cannot make {directory}: {error.strerror}"
        directories.append(directory)
    for directory in directories:
        if (directory / "cpu.shares").exists():
            (directory / "cpu.shares").write_text(str(shares))
    return CpuGroup(tuple(directories))


def machine_busy_seconds(stat: Path = Path("/proc/stat")) -> float:
    """CPU seconds the whole machine has spent busy since boot (all but idle and iowait), from /proc/stat."""
    fields = [int(value) for value in stat.read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
