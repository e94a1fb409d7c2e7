"""The image's hash-locked dependencies: ``requirements.lock`` (runtime) and ``requirements-build.lock``.

``compile`` regenerates both with ``uv pip compile --generate-hashes`` (every file PyPI serves for each
pinned version, so the same lock works for amd64 and arm64 builds); ``check`` is the offline drift check CI
runs: every runtime dependency in pyproject.toml is locked at a version its specifier admits, every locked
requirement carries hashes, nothing is locked that pyproject does not need, and (given a wheelhouse) the lock
is closed under the wheels' own ``Requires-Dist``. ``wheelhouse DIR`` downloads exactly the locked files for
the image's platform (CPython 3.11, manylinux x86_64), hash-checked, so the image build needs no network.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import re
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_LOCK = ROOT / "requirements.lock"
BUILD_LOCK = ROOT / "requirements-build.lock"
BUILD_IN = ROOT / "tools/images/requirements-build.in"
PYTHON_VERSION = "3.11"
# The image: Debian bookworm (glibc 2.36) or python:3.11-slim-bookworm, x86_64.
TARGET_ENV = {
    "python_version": "3.11",
    "python_full_version": "3.11.2",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}
# pip does not widen --platform to older manylinux tags itself: name each (glibc 2.36 down to 2.5).
PIP_PLATFORM = [
    *(arg for minor in range(36, 4, -1) for arg in ("--platform", f"manylinux_2_{minor}_x86_64")),
    *(
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "manylinux2010_x86_64",
        "--platform",
        "manylinux1_x86_64",
    ),
    *("--implementation", "cp", "--python-version", "3.11"),
]
LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>[^\s;\\]+)\s*(?:;\s*(?P<marker>[^\\]+?))?\s*\\?$")
HASH = re.compile(r"--hash=sha256:(?P<digest>[0-9a-f]{64})")


@dataclass
class Locked:
    """One ``name==version`` entry of a lock file, with its marker and allowed sha256 digests."""

    name: str
    version: Version
    marker: Marker | None
    hashes: set[str] = field(default_factory=set)

    def applies(self) -> bool:
        """True when the image (Linux x86_64, CPython 3.11) installs this entry."""
        return self.marker is None or self.marker.evaluate(TARGET_ENV)


def parse_lock(path: Path) -> dict[str, Locked]:
    """Entries of a ``--generate-hashes`` lock file, keyed by canonical name."""
    entries: dict[str, Locked] = {}
    current: Locked | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = LINE.match(line)
        if match:
            marker = match["marker"]
            current = Locked(
                canonicalize_name(match["name"]),
                Version(match["version"]),
                Marker(marker) if marker else None,
            )
            entries[current.name] = current
            continue
        hashed = HASH.search(line)
        if hashed and current is not None:
            current.hashes.add(hashed["digest"])
        elif not hashed:
            raise ValueError(f"{path.name}: unexpected line {raw!r}")
    return entries


def runtime_requirements() -> list[Requirement]:
    """pyproject.toml's ``[project] dependencies``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """A wheel's ``Requires-Dist`` (its own dependencies), read from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    return [Requirement(text) for text in metadata.get_all("Requires-Dist") or []]


def check(wheelhouse: Path | None) -> list[str]:
    """Every way the runtime lock can disagree with pyproject.toml (empty when it matches)."""
    problems: list[str] = []
    lock = parse_lock(RUNTIME_LOCK)
    for entry in lock.values():
        if not entry.hashes:
            problems.append(f"{entry.name}=={entry.version} has no --hash")
    wanted: dict[str, list[Requirement]] = {}
    for req in runtime_requirements():
        name = canonicalize_name(req.name)
        wanted.setdefault(name, []).append(req)
        locked = lock.get(name)
        if locked is None:
            problems.append(f"{req} (pyproject.toml) is not in {RUNTIME_LOCK.name}")
        elif not req.specifier.contains(locked.version, prereleases=True):
            problems.append(f"{RUNTIME_LOCK.name} pins {name}=={locked.version}, pyproject.toml wants {req}")
    if wheelhouse is not None:
        problems += _check_closure(lock, wheelhouse, set(wanted))
    for build in parse_lock(BUILD_LOCK).values():
        if not build.hashes:
            problems.append(f"{BUILD_LOCK.name}: {build.name}=={build.version} has no --hash")
    return problems


def _check_closure(lock: dict[str, Locked], wheelhouse: Path, direct: set[str]) -> list[str]:
    """Walk the dependency graph from pyproject's dependencies through the wheels' metadata."""
    problems: list[str] = []
    wheels = {canonicalize_name(w.name.split("-")[0]): w for w in wheelhouse.glob("*.whl")}
    needed: set[str] = set()
    seen: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(name, "") for name in sorted(direct)]
    todo += [(canonicalize_name(r.name), x) for r in runtime_requirements() for x in r.extras]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        needed.add(name)
        wheel = wheels.get(name)
        if wheel is None:
            problems.append(f"{name}: no wheel in {wheelhouse}")
            continue
        for req in wheel_requirements(wheel):
            if req.marker is not None and not req.marker.evaluate({**TARGET_ENV, "extra": extra}):
                continue
            dep = canonicalize_name(req.name)
            locked = lock.get(dep)
            if locked is None:
                problems.append(f"{name} needs {req}, which {RUNTIME_LOCK.name} lacks")
            elif not req.specifier.contains(locked.version, prereleases=True):
                problems.append(f"{name} needs {req}, {RUNTIME_LOCK.name} pins {locked.version}")
            else:
                todo += [(dep, "")] + [(dep, x) for x in req.extras]
    extra = sorted(n for n, e in lock.items() if e.applies() and n not in needed)
    problems += [
        f"{n} is locked but nothing in pyproject.toml needs it on the image's platform" for n in extra
    ]
    return problems


def compile_locks() -> None:
    """Regenerate both lock files from pyproject.toml and requirements-build.in (needs the index)."""
    common = ["--universal", "--python-version", PYTHON_VERSION, "--generate-hashes", "--quiet"]
    uv = [sys.executable, "-m", "uv", "pip", "compile"]
    for source, lock in (("pyproject.toml", RUNTIME_LOCK), (str(BUILD_IN.relative_to(ROOT)), BUILD_LOCK)):
        subprocess.run([*uv, source, *common, "-o", lock.name], cwd=ROOT, check=True)


def build_wheelhouse(target: Path) -> None:
    """Download the locked wheels for the image's platform into ``target``, each checked against the lock."""
    target.mkdir(parents=True, exist_ok=True)
    for lock in (RUNTIME_LOCK, BUILD_LOCK):
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--require-hashes", "--only-binary=:all:", *PIP_PLATFORM, "-d", str(target), "-r", str(lock)],
            check=True,
        )  # fmt: skip
    allowed = {h for lock in (RUNTIME_LOCK, BUILD_LOCK) for e in parse_lock(lock).values() for h in e.hashes}
    for wheel in target.glob("*.whl"):
        if hashlib.sha256(wheel.read_bytes()).hexdigest() not in allowed:
            raise SystemExit(f"{wheel} matches no hash of the locks (remove it and run again)")


def main(argv: list[str] | None = None) -> int:
    """``lock.py compile | check [--wheelhouse DIR] | wheelhouse DIR``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("compile", help="regenerate requirements.lock and requirements-build.lock (needs PyPI)")
    checking = sub.add_parser("check", help="fail if requirements.lock drifted from pyproject.toml")
    checking.add_argument("--wheelhouse", type=Path, help="also check the closure against these wheels")
    house = sub.add_parser("wheelhouse", help="download the locked wheels for the image into DIR")
    house.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    if args.command == "compile":
        compile_locks()
    elif args.command == "wheelhouse":
        build_wheelhouse(args.dir)
    else:
        problems = check(args.wheelhouse)
        for problem in problems:
            print(f"lock drift: {problem}", file=sys.stderr)
        if problems:
            print("run `make lock` and commit requirements.lock", file=sys.stderr)
            return 1
        print(f"{RUNTIME_LOCK.name} matches pyproject.toml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
