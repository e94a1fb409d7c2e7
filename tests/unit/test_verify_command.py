"""``uds-vm-operator verify-disk``: exit codes, stdout JSON and the termination-message file."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from uds_vm_operator.operator_main import main

DATA = os.urandom(200_000)
GOOD = "sha256:" + hashlib.sha256(DATA[:150_000]).hexdigest()
BAD = "sha256:" + hashlib.sha256(b"something else").hexdigest()


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    path = tmp_path / "disk.img"
    path.write_bytes(DATA)
    return path


def run(disk: Path, expected: str, log: Path, size: int = 150_000) -> int:
    return main(
        [
            "verify-disk",
            "--path",
            str(disk),
            "--virtual-size",
            str(size),
            "--expected",
            expected,
            "--termination-log",
            str(log),
        ]
    )


def test_match_exits_0_and_writes_the_termination_log(
    disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    assert run(disk, GOOD, log) == 0
    written = json.loads(log.read_text())
    assert written == {"result": "match", "expected": GOOD, "actual": GOOD, "bytes": 150_000}
    assert json.loads(capsys.readouterr().out) == written


def test_mismatch_exits_1_and_names_both_digests(disk: Path, tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    assert run(disk, BAD, log) == 1
    written = json.loads(log.read_text())
    assert written["result"] == "mismatch"
    assert written["expected"] == BAD
    assert written["actual"] == GOOD


def test_too_short_disk_exits_2_with_a_message(
    disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    assert run(disk, GOOD, log, size=300_000) == 2
    written = json.loads(log.read_text())
    assert written["result"] == "error"
    assert "holds 200000 bytes" in written["message"]
    assert "verify-disk: error:" in capsys.readouterr().err


def test_unwritable_termination_log_warns_but_keeps_the_verdict(
    disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(disk, GOOD, tmp_path / "missing-dir" / "log") == 0
    assert "could not write the result" in capsys.readouterr().err


@pytest.mark.parametrize("size", ["0", "-5", "12abc"])
def test_bad_virtual_size_is_a_usage_error(disk: Path, size: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["verify-disk", "--path", str(disk), "--virtual-size", size, "--expected", GOOD])
    assert exit_info.value.code == 2
    assert "--virtual-size" in capsys.readouterr().err


def test_console_script_runs_without_a_traceback(disk: Path, tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("uds-vm-operator")
    assert exe.exists(), "install the package first: .venv/bin/pip install -e '.[dev]'"
    proc = subprocess.run(
        [
            str(exe),
            "verify-disk",
            "--path",
            str(disk),
            "--virtual-size",
            "150000",
            "--expected",
            BAD,
            "--termination-log",
            "",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["actual"] == GOOD
