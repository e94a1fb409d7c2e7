"""tools/build_progress: a quiet build says what it is doing; its own output and exit status pass through."""

from __future__ import annotations

import re
import subprocess
import sys

from tools.build_progress import describe, heartbeat


def test_build_steps_are_named_by_what_they_make() -> None:
    go = ["/usr/local/go/bin/go", "build", "-trimpath", "-o", "/c/bin/virt-launcher", "kubevirt.io/cmd/x"]
    assert describe(go) == "go build virt-launcher"
    root = [
        "mmdebstrap",
        "--mode=root",
        "--variant=minbase",
        "bookworm",
        "/tmp/work/root",
        "deb http://m/ x main",
    ]
    assert describe(root) == "mmdebstrap root"
    assert describe(["buildah", "commit", "x"]) == "buildah commit"
    assert describe(["/usr/bin/python3", "-m", "pytest"]) is None
    assert describe([]) is None


def test_a_heartbeat_gives_the_time_so_far_each_step_and_the_load() -> None:
    line = heartbeat(95.0, [("go build zarf", 301.0), ("mmdebstrap root", 12.0)], 3.25)
    assert line == "[1m35s so far] still building: go build zarf (5m01s), mmdebstrap root (0m12s); load 3.2"
    assert heartbeat(5.0, [], 0.0).endswith("no build step seen (waiting); load 0.0")


def test_silence_gets_heartbeats_and_the_commands_output_and_status_pass_through() -> None:
    """A real child that prints, stays quiet for 2.5 s, prints again and fails: heartbeats fill the quiet."""
    script = "echo first; sleep 2.5; echo second; exit 3"
    done = subprocess.run(
        [sys.executable, "-m", "tools.build_progress", "--every", "1", "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 3, done.stderr
    assert lines[0] == "first" and lines[-1] == "second", lines
    beats = [
        line
        for line in lines[1:-1]
        if re.fullmatch(r"\[0m0\ds so far\] still building: .*; load \d+\.\d", line)
    ]
    assert len(beats) >= 1 and len(beats) == len(lines) - 2, lines


def test_without_a_command_it_says_how_to_call_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.build_progress"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "give the build command after --" in done.stderr
