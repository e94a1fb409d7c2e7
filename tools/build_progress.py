"""Run a build command and, whenever it has printed nothing for a while, say what it is doing.

`make -j3 demo-builds` on a new machine builds for half an hour, and with `--output-sync` make holds each
build's lines until that build ends: without this a newcomer watches minutes of silence. Every
``--every`` seconds without output, one line names each build still running (read from /proc: a `go build`
by the binary it writes, an `mmdebstrap` by the root it makes, a `buildah` step, `apt-get`), how long each has
run, the time so far and the machine's load. The command's own output passes through unchanged, and its exit
status is this program's.

    python -m tools.build_progress --every 30 -- make -j3 --output-sync=target demo-builds
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tools.guest_census import CLOCK_TICKS, stat_fields

PROC = Path("/proc")


def _argv(pid: str) -> list[str]:
    try:
        return (PROC / pid / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def describe(argv: Sequence[str]) -> str | None:
    """What a build process is, in a few words, or None for a process that is not a build step."""
    if not argv:
        return None
    program = Path(argv[0]).name
    if program == "go" and len(argv) > 1 and argv[1] == "build":
        output = argv[argv.index("-o") + 1] if "-o" in argv[:-1] else argv[-1]
        return f"go build {Path(output).name}"
    if program == "mmdebstrap":  # mmdebstrap [options] SUITE TARGET [MIRROR...]: the root it makes
        positional = [a for a in argv[1:] if not a.startswith("-") and not a.startswith("deb ")]
        return f"mmdebstrap {Path(positional[1]).name}" if len(positional) > 1 else "mmdebstrap"
    if program == "buildah" and len(argv) > 1:
        return f"buildah {argv[1]}"
    if program in ("apt-get", "dpkg") and len(argv) > 1:
        return f"{program} {argv[1]}"
    return None


def _age_s(pid: str, uptime_s: float) -> float:
    fields = stat_fields(pid)
    return max(0.0, uptime_s - int(fields[19]) / CLOCK_TICKS) if fields else 0.0


def running_builds() -> list[tuple[str, float]]:
    """(description, seconds it has run) of every build step running on the machine, longest first; one
    entry per description (a `go build` forks many compilers)."""
    try:
        uptime_s = float((PROC / "uptime").read_text().split()[0])
    except (OSError, ValueError):
        return []
    found: dict[str, float] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (what := describe(_argv(entry.name))) is not None:
            found[what] = max(found.get(what, 0.0), _age_s(entry.name, uptime_s))
    return sorted(found.items(), key=lambda item: -item[1])


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def heartbeat(elapsed_s: float, builds: Sequence[tuple[str, float]], load: float) -> str:
    """The line printed after a quiet stretch."""
    doing = ", ".join(f"{what} ({_clock(age)})" for what, age in builds) or "no build step seen (waiting)"
    return f"[{_clock(elapsed_s)} so far] still building: {doing}; load {load:.1f}"


def run(command: Sequence[str], every_s: float) -> int:
    """Run ``command``, pass its output through, print a heartbeat after each ``every_s`` of silence."""
    started = time.monotonic()
    last_output = [started]
    process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    done = threading.Event()

    def beat() -> None:
        while not done.wait(1.0):
            now = time.monotonic()
            if now - last_output[0] >= every_s:
                line = heartbeat(now - started, running_builds(), os.getloadavg()[0])
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
                last_output[0] = now

    thread = threading.Thread(target=beat, name="build-progress", daemon=True)
    thread.start()
    try:
        for chunk in iter(process.stdout.readline, b""):
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
            last_output[0] = time.monotonic()
        return process.wait()
    except KeyboardInterrupt:
        process.terminate()
        return process.wait()
    finally:
        done.set()
        thread.join(timeout=5)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--every", type=float, default=30.0, help="seconds of silence before a heartbeat")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the build command (after --)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the build command after --")
    return run(command, args.every)


if __name__ == "__main__":
    raise SystemExit(main())
