"""The hash lock is honoured and checked: a tampered wheel is refused, a drifted lock is reported."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from tests.build.conftest import ROOT, BuiltImage

LOCKS = ("requirements.lock", "requirements-build.lock")


def wheelhouse() -> Path:
    """The host wheelhouse ``make image`` downloaded (keyed like tools/images/image.sh: the locks' hash)."""
    key = hashlib.sha256(b"".join((ROOT / name).read_bytes() for name in LOCKS)).hexdigest()[:16]
    return Path.home() / ".cache/uds-vm-operator" / f"wheelhouse-{key}"


def pip_install(find_links: Path, target: Path) -> subprocess.CompletedProcess[str]:
    """What the Dockerfile runs, offline, into a throwaway target."""
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-index",
         "--find-links", str(find_links), "--require-hashes", "--no-deps", "--only-binary=:all:",
         "--no-compile", "--target", str(target), "-r", str(ROOT / "requirements.lock")],
        text=True, capture_output=True, check=False, timeout=600,
    )  # fmt: skip


def test_locked_wheelhouse_installs_and_a_tampered_wheel_is_refused(
    built_image: BuiltImage, tmp_path: Path
) -> None:
    house = wheelhouse()
    assert (house / ".complete").exists()
    good = pip_install(house, tmp_path / "good")
    assert good.returncode == 0, good.stderr
    assert (tmp_path / "good/kopf").is_dir()

    tampered = tmp_path / "tampered"
    shutil.copytree(house, tampered)
    wheel = next(tampered.glob("kopf-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    bad = pip_install(tampered, tmp_path / "bad")
    assert bad.returncode != 0
    assert "DO NOT MATCH THE HASHES" in bad.stderr and "kopf" in bad.stderr
    assert not (tmp_path / "bad/kopf").exists()


def copy_for_check(tmp_path: Path) -> Path:
    """A minimal copy of the repo that release/locks.py treats as its root."""
    (tmp_path / "release").mkdir(parents=True)
    shutil.copy(ROOT / "release/locks.py", tmp_path / "release/locks.py")
    for name in ("pyproject.toml", *LOCKS):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def lock_check(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``locks.py check`` against the copy."""
    return subprocess.run(
        [sys.executable, str(root / "release/locks.py"), "check", *args],
        text=True, capture_output=True, check=False,
    )  # fmt: skip


def test_drift_check_passes_on_the_repo_and_catches_drift(built_image: BuiltImage, tmp_path: Path) -> None:
    assert lock_check(ROOT, "--wheelhouse", str(wheelhouse())).returncode == 0
    root = copy_for_check(tmp_path)
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace("dependencies = [\n", 'dependencies = [\n  "requests>=2",\n', 1))
    added = lock_check(root)
    assert added.returncode == 1 and "requests>=2" in added.stderr
    pyproject.write_text(text.replace('"kopf>=1.45"', '"kopf>=99"', 1))
    raised = lock_check(root)
    assert raised.returncode == 1 and "kopf" in raised.stderr
    pyproject.write_text(text)
    lock = root / "requirements.lock"
    lock.write_text(lock.read_text().replace("kopf==", "kopf==0.", 1))
    assert lock_check(root).returncode == 1
