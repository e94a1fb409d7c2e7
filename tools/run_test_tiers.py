"""`make test`'s last step: every test tier, in two pytest processes that run at the same time, and the
static checks before the tiers that are not on the critical path.

Why two: the real-node tier spends its quarter of an hour waiting on a kubelet, CDI and KubeVirt (the
machine's load stays between 1 and 2 on 2 cores), while the other tiers (control planes, QEMU guests, image
builds) want the CPU. One after the other they took 32 minutes; side by side they share the wait.

Why they can: the tiers share nothing that one could break for the other. The node tier has the machine's
only node (its lock file), its own control plane, registry and state dir (/tmp/udsn-*); the other tiers start
control planes of their own on free ports; image builds that both may ask for serialise on the image cache's
lock (tools/images/lib.sh). Every test still runs: `tests` minus `tests/node` in one process, the node tier
in the other, so a new tier directory is picked up without editing this file.

Priority: the node tier is the critical path, so the other tiers run in one cgroup that weighs as one session
(tools/cpu_groups.py) instead of one session per control plane and QEMU guest: they get every cycle the node
tier leaves idle, and a guest booting on the node is no longer outvoted. Their CPU seconds and the machine's
are printed at the end.

Before the other tiers, in their cgroup: the builds only they need and the static checks (BEFORE). The node
tier starts as soon as its own builds are done instead of after them: the checks took 2.6 min on a quiet
2-core machine, the Go anchor's build 229 s of a cold CI log, and the other tiers ended 34 min before the node
tier. A failed check fails the run, and the tiers after it still run, so one run reports every failure.

Output: each lane writes its own log; a line every HEARTBEAT_S says which are still running, and each
log is printed whole, under a header, when its process ends (like `make --output-sync`). The exit status is
non-zero when either failed; both always run to the end, so one run reports every failure.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from tools.cpu_groups import SESSION_SHARES, CpuGroup, machine_busy_seconds, make_group
from tools.guest_census import GuestCensus

ROOT = Path(__file__).resolve().parents[1]
TIER_TIMES_ENV = "UDS_TIER_TIMES"
"""Where every pytest process appends each test phase's seconds under its tier (tests/conftest.py)."""
HEARTBEAT_S = 120.0
STOP_GRACE_S = 120.0  # for the node tier's teardown (node-down, cdi-down) after a SIGTERM

SECOND_NODE_LANE = [
    "tests/node/cdi/test_cdi_upload.py",
    "tests/node/cdi/test_cdi_upload_faults.py",
    "tests/node/cdi/test_cdi_http_import.py",
    "tests/node/cdi/test_cdi_sizing.py",
    "tests/node/cdi/test_cdi_kubevirt_boot.py",
    "tests/node/test_node_basics.py",
    "tests/node/test_network_policy_packets.py",
    "tests/node/test_kubevirt_launcher_packets.py",
    "tests/node/test_verifier_real_volumes.py",
    "tests/node/test_kubevirt_admission.py",
]
"""The node tests the second node lane runs, on the first lane's node (tests/node/lanes.py says what waits
for what). Chosen so both lanes end together: each guest boot under software emulation is one lane's wait.
The CDI boot (two Debian guests) comes after the other CDI files: at the lanes' start the first lane boots the
backup test's Debian guests and the other tiers run their builds and checks, and seven guests at once on 2
cores made a boot run past its test's timeout (CI, 2026-12-08)."""
# name -> pytest arguments. Together they cover `tests` exactly once.
# The node tier is the long one (every VM boots under software emulation), so it runs in two lanes on one
# node; the unit tier goes with the others, whose run is about half as long.
GROUPS: dict[str, list[str]] = {
    "node": ["tests/node", *(f"--ignore={path}" for path in SECOND_NODE_LANE)],
    "node, second lane": SECOND_NODE_LANE,
    "the other tiers": ["tests", "--ignore=tests/node"],
}
NODE_LANES = {"node": "first", "node, second lane": "second"}
"""group -> its lane on the node (UDS_NODE_LANE); both get the same marker folder (UDS_NODE_LANES)."""
LANES_ENV = "UDS_NODE_LANES"
LANE_ENV = "UDS_NODE_LANE"


def ended_marker(lane: str) -> str:
    """The marker file written into the lanes' folder once lane ``lane``'s process has ended, however."""
    return f"{lane}-ended"


BEFORE: dict[str, list[list[str]]] = {
    "the other tiers": [
        ["make", "--no-print-directory", "-j2", "--output-sync=target", "other-tier-builds", "test-checks"]
    ],
}
"""Commands a group runs one after another before its pytest process, in the same log and cgroup."""
ONE_SESSION = frozenset({"the other tiers"})
"""The groups that weigh as one session against the node tier (the others keep the kernel's default share)."""
DURATIONS = ["--durations=30"]
"""Each process lists its slowest tests, so a CI log says where the time went."""


@dataclass
class Running:
    """One lane of ours: its commands still to run, the one running now, its log and when it started."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    started: float
    cwd: Path
    queued: list[list[str]] = field(default_factory=list)
    cpu_group: CpuGroup | None = None
    worst: int = 0
    command: str = ""
    env: dict[str, str] | None = None
    ended_file: Path | None = None

    def launch(self, command: Sequence[str]) -> None:
        """Start ``command`` as this lane's current process (in its log and cgroup)."""
        self.process = _popen(command, self.cwd, self.log, self.cpu_group, self.env)
        self.command = " ".join(command)

    def mark_ended(self) -> None:
        """Tell the other node lane that this one's process has ended (it never waits for a dead lane)."""
        if self.ended_file is not None:
            self.ended_file.write_text(str(self.worst), encoding="utf-8")

    def poll(self) -> int | None:
        """None while the lane runs; its exit status (the first non-zero of its commands) once all ended.

        A command that fails does not stop the ones after it: the tiers still run after a failed check."""
        returncode = self.process.poll()
        if returncode is None:
            return None
        if returncode != 0:
            self.log.write(f"\nmake test: {self.name}: exit {returncode}: {self.command}\n".encode())
            self.log.flush()
        self.worst = self.worst or returncode
        if self.queued:
            self.launch(self.queued.pop(0))
            return None
        self.mark_ended()
        return self.worst

    def interrupt(self) -> None:
        """SIGINT to the running command; nothing queued starts after it."""
        self.queued.clear()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)


def _popen(
    command: Sequence[str],
    cwd: Path,
    log: IO[bytes],
    cpu_group: CpuGroup | None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(command),
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        preexec_fn=cpu_group.join if cpu_group else None,  # noqa: PLW1509 (no threads here)
    )


def start(
    name: str,
    commands: Sequence[Sequence[str]],
    log_dir: Path,
    cwd: Path,
    *,
    cpu_group: CpuGroup | None = None,
    node_lane: tuple[Path, str] | None = None,
    tier_times: Path | None = None,
) -> Running:
    """Start a lane's first command; the rest run one after another as each ends (``Running.poll``).

    ``node_lane`` (the lanes' marker folder, this lane's name) puts the processes in that node lane."""
    log_path = log_dir / (slug(name) + ".log")
    log = log_path.open("wb")
    env: dict[str, str] | None = None
    ended_file = None
    if tier_times is not None:
        env = {**os.environ, TIER_TIMES_ENV: str(tier_times)}
    if node_lane is not None:
        folder, lane = node_lane
        folder.mkdir(parents=True, exist_ok=True)
        env = {**(env or os.environ), LANES_ENV: str(folder), LANE_ENV: lane}
        ended_file = folder / ended_marker(lane)
    first, *rest = [list(command) for command in commands]
    process = _popen(first, cwd, log, cpu_group, env)
    return Running(
        name,
        process,
        log_path,
        log,
        time.monotonic(),
        cwd,
        rest,
        cpu_group,
        command=" ".join(first),
        env=env,
        ended_file=ended_file,
    )


def pytest_command(args: Sequence[str], extra: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", *args, *extra]


def slug(name: str) -> str:
    """A group's name as a file or cgroup name."""
    return name.replace(" ", "-").replace("+", "-")


def session_group(name: str) -> CpuGroup | None:
    """The cgroup a group that weighs as one session runs in, or None (and why) without cgroup v1."""
    made = make_group(f"uds-test-tiers-{os.getpid()}-{slug(name)}", SESSION_SHARES)
    if isinstance(made, str):
        print(f"make test: {name} not weighted: {made}", flush=True)
        return None
    return made


def report_cpu(runs: Sequence[Running], busy_before: float, started: float) -> None:
    """The machine's CPU seconds in the run and each weighted group's share; remove the groups."""
    busy = machine_busy_seconds() - busy_before
    wall = time.monotonic() - started
    parts = [f"the machine was busy {busy:.0f} CPU-s in {wall:.0f} s ({busy / wall:.2f} cores)"]
    for run in runs:
        if run.cpu_group is not None:
            parts.append(f"{run.name} {run.cpu_group.cpu_seconds():.0f} CPU-s (cpu.shares {SESSION_SHARES})")
            for problem in run.cpu_group.remove():
                print(f"make test: cgroup left behind: {problem}", flush=True)
    print("make test: CPU: " + "; ".join(parts), flush=True)


def tier_seconds(times: Path) -> dict[str, float]:
    """Per tier, the seconds its tests' phases took (the file tests/conftest.py appended to)."""
    totals: dict[str, float] = {}
    if times.is_file():
        for line in times.read_text(encoding="utf-8").splitlines():
            tier, _, seconds = line.partition("\t")
            try:
                totals[tier] = totals.get(tier, 0.0) + float(seconds)
            except ValueError:
                continue
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def report_run(times: Path, census: GuestCensus) -> None:
    """What the run cost, for the next change to compare with: each tier's wall time, the boots by kind."""
    tiers = ", ".join(f"{tier} {seconds / 60:.1f} min" for tier, seconds in tier_seconds(times).items())
    print(f"make test: tiers (their tests' seconds): {tiers or 'none ran'}", flush=True)
    print(f"make test: guest boots by kind: {census.line()}", flush=True)


def report(run: Running, returncode: int) -> None:
    """Print the finished process's whole log under a header naming it, its time and its exit status."""
    run.log.close()
    minutes, seconds = divmod(int(time.monotonic() - run.started), 60)
    verdict = "passed" if returncode == 0 else f"FAILED (exit {returncode})"
    took = f"{minutes} min {seconds:02d} s"
    print(f"\n===== {run.name}: {verdict} after {took} ({run.log_path}) =====", flush=True)
    sys.stdout.buffer.write(run.log_path.read_bytes())
    sys.stdout.flush()


def run_all(
    groups: dict[str, list[str]],
    extra: Sequence[str],
    log_dir: Path,
    cwd: Path = ROOT,
    *,
    handle_signals: bool = False,
    one_session: frozenset[str] = frozenset(),
    before: dict[str, list[list[str]]] | None = None,
    node_lanes: dict[str, str] | None = None,
) -> int:
    """Start every group, wait for all of them (printing heartbeats), print each log as it ends.

    A group named in ``before`` runs those commands first, then its pytest process (one lane, one log).
    A group named in ``node_lanes`` runs in that lane of the node tier (tests/node/lanes.py).

    With ``handle_signals`` (the command line), SIGINT/SIGTERM are passed on to the pytest processes
    before this one exits, so nothing they started outlives an interrupted `make test`.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    busy_before, started = machine_busy_seconds(), time.monotonic()
    lanes_folder = log_dir / "node-lanes"
    times = log_dir / "tier-times.tsv"
    census = GuestCensus().start()
    runs = [
        start(
            name,
            [*(before or {}).get(name, []), pytest_command(args, extra)],
            log_dir,
            cwd,
            cpu_group=session_group(name) if name in one_session else None,
            node_lane=(lanes_folder, (node_lanes or {})[name]) if name in (node_lanes or {}) else None,
            tier_times=times,
        )
        for name, args in groups.items()
    ]

    def stop(signum: int, _frame: FrameType | None) -> None:
        # Our own children only, by their PIDs. SIGINT, not SIGTERM: pytest turns it into KeyboardInterrupt
        # and runs the fixtures' teardown (node-down, cdi-down), where SIGTERM would end it on the spot.
        for run in runs:
            run.interrupt()
        for run in runs:
            try:
                run.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                run.process.kill()
            run.mark_ended()
        census.stop()
        report_run(times, census)
        report_cpu(runs, busy_before, started)
        raise SystemExit(128 + signum)

    if handle_signals:
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    print(f"make test: {len(runs)} lanes at once; logs in {log_dir}", flush=True)
    for run in runs:
        first = " then ".join(" ".join(command[1:]) for command in (before or {}).get(run.name, []))
        steps = (first + ", then ") if first else ""
        print(f"  {run.name}: {steps}pytest {' '.join(groups[run.name])}", flush=True)
    status = 0
    pending = list(runs)
    last_beat = time.monotonic()
    while pending:
        for run in list(pending):
            returncode = run.poll()
            if returncode is not None:
                pending.remove(run)
                report(run, returncode)
                status = status or returncode
        if pending and time.monotonic() - last_beat >= HEARTBEAT_S:
            last_beat = time.monotonic()
            still = ", ".join(f"{r.name} ({int(last_beat - r.started) // 60} min)" for r in pending)
            load = os.getloadavg()[0]  # how busy the 2 cores were: says whether a slow tier waited or worked
            print(f"make test: still running: {still}; load {load:.1f}", flush=True)
        time.sleep(1.0)
    census.stop()
    report_run(times, census)
    report_cpu(runs, busy_before, started)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--log-dir", type=Path, help="where the logs go (default: a new temporary folder)")
    parser.add_argument("pytest_args", nargs="*", help="passed to both pytest processes (after --)")
    args = parser.parse_args(argv)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="uds-test-tiers-"))
    return run_all(
        GROUPS,
        [*DURATIONS, *args.pytest_args],
        log_dir,
        handle_signals=True,
        one_session=ONE_SESSION,
        before=BEFORE,
        node_lanes=NODE_LANES,
    )


if __name__ == "__main__":
    raise SystemExit(main())
