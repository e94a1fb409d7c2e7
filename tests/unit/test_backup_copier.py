"""``uds-vm-operator backup-disks``: the JSON it leaves in the termination log, exit codes, pruning, progress.

End-to-end tests run the command through ``operator_main.main`` against the Versity S3 gateway
(tests/unit/s3_server.py), which checks signatures, the signing region and each part's payload sha256.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit import s3_server
from tests.unit.s3_server import bucket_fixture, gateway_fixture  # noqa: F401 (shared fixtures)
from uds_vm_operator.backup.command import ACCESS_KEY_ENV, SECRET_KEY_ENV
from uds_vm_operator.backup.copier import (
    MESSAGE_LIMIT,
    TERMINATION_MESSAGE_LIMIT,
    BackupUsageError,
    DiskSpec,
    Progress,
    check_plan,
    error_json,
    parse_disk,
)
from uds_vm_operator.operator_main import build_parser, main

MIB = 1 << 20


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ACCESS_KEY_ENV, s3_server.ACCESS_KEY)
    monkeypatch.setenv(SECRET_KEY_ENV, s3_server.SECRET_KEY)


def write_disk(tmp_path: Path, index: int, data: bytes) -> Path:
    """A filesystem volume's disk as the pod sees it: /disk-<n>/disk.img."""
    path = tmp_path / f"disk-{index}" / "disk.img"
    path.parent.mkdir()
    path.write_bytes(data)
    return path


def backup(endpoint: str, bucket: str, log: Path, *extra: str) -> int:
    argv = ["backup-disks", "--endpoint", endpoint, "--bucket", bucket, "--part-mib", "5"]
    return main([*argv, "--termination-log", str(log), *extra])


def read_log(log: Path) -> dict[str, Any]:
    text = log.read_text()
    assert len(text.encode()) < TERMINATION_MESSAGE_LIMIT
    document: dict[str, Any] = json.loads(text)
    return document


# ---- pure parts ----


def test_the_sub_command_is_on_the_operators_parser() -> None:
    args = build_parser().parse_args(
        ["backup-disks", "--endpoint", "http://s:1", "--bucket", "b", "--disk", "root=/disk-0/disk.img=k"]
    )
    assert (args.part_mib, args.termination_log, args.region, args.prune) == (
        32,
        "/dev/termination-log",
        "",
        [],
    )


def test_parse_disk_needs_three_non_empty_fields() -> None:
    assert parse_disk("root=/dev/uds-disk-0=vm/root.img") == DiskSpec(
        "root", "/dev/uds-disk-0", "vm/root.img"
    )
    for bad in ("root=/disk-0/disk.img", "root==key", "a=b=c=d", "=p=k"):
        with pytest.raises(BackupUsageError, match="NAME=PATH=KEY"):
            parse_disk(bad)


def test_plans_that_would_lose_or_overwrite_a_backup_are_refused() -> None:
    root = DiskSpec("root", "/disk-0/disk.img", "vm/new/root.img")
    data = DiskSpec("data", "/disk-1/disk.img", "vm/new/data.img")
    check_plan([root, data], ["vm/old/root.img"])
    with pytest.raises(BackupUsageError, match="would delete the new backup"):
        check_plan([root], [root.key])
    with pytest.raises(BackupUsageError, match="share the key"):
        check_plan([root, DiskSpec("data", "/disk-1/disk.img", root.key)], [])
    with pytest.raises(BackupUsageError, match="share the name"):
        check_plan([root, DiskSpec("root", "/disk-1/disk.img", "other")], [])
    many = [DiskSpec(f"d{i}", f"/disk-{i}/disk.img", f"vm/{'k' * 200}/{i}") for i in range(12)]
    with pytest.raises(BackupUsageError, match="4096-byte termination message"):
        check_plan(many, [])


def test_error_json_is_one_line_cut_to_fit() -> None:
    document = json.loads(error_json("first line\nsecond\tline  " + "x" * 5000))
    assert document["result"] == "error"
    assert document["message"].startswith("first line second line xxx")
    assert len(document["message"]) == MESSAGE_LIMIT
    wide = error_json("\u00e9\u4e2d\U0001f600" * 2000)
    assert len(wide.encode()) < TERMINATION_MESSAGE_LIMIT


def test_progress_prints_at_most_every_interval() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = Progress(DiskSpec("root", "/p", "k"), 100 * MIB, out=out, interval_s=5, clock=lambda: now[0])
    for _ in range(9):
        now[0] += 1
        progress.part_sent(10 * MIB)
    now[0] += 1
    progress.part_sent(10 * MIB)
    progress.finished("ab" * 32)
    lines = out.getvalue().splitlines()
    assert lines == [
        "backup-disks: disk root: 50% (50 of 100 MiB) at 10 MiB/s",
        f"backup-disks: disk root: done: 100 MiB in 10.0 s at 10 MiB/s, sha256:{'ab' * 32}",
    ]


def test_missing_credentials_are_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ACCESS_KEY_ENV, raising=False)
    monkeypatch.setenv(SECRET_KEY_ENV, "s")
    log = tmp_path / "termination-log"
    assert backup("http://127.0.0.1:1", "b", log, "--disk", "root=/nowhere=k") == 2
    assert read_log(log) == {
        "result": "error",
        "message": f"set {ACCESS_KEY_ENV} (the S3 credentials; the backup pod takes them from a Secret)",
    }


@pytest.mark.usefixtures("credentials")
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "give at least one --disk"),
        (["--disk", "root=/disk-0/disk.img"], "must be NAME=PATH=KEY"),
        (["--disk", "root=/p=k", "--part-mib", "4"], "--part-mib 4 must be within 5..512"),
        (["--disk", "root=/p=k", "--prune", "k"], "would delete the new backup"),
    ],
)
def test_usage_errors_exit_2_with_a_json_error(tmp_path: Path, extra: list[str], message: str) -> None:
    log = tmp_path / "termination-log"
    assert backup("http://127.0.0.1:1", "b", log, *extra) == 2
    assert message in read_log(log)["message"]


@pytest.mark.usefixtures("credentials")
def test_an_endpoint_with_a_path_is_a_usage_error(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    assert backup("http://store:9000/s3", "b", log, "--disk", "root=/p=k") == 2
    assert "must be only a scheme, host and port" in read_log(log)["message"]


# ---- against the real gateway ----


@pytest.mark.usefixtures("credentials")
def test_two_disks_end_to_end(
    gateway: s3_server.Gateway, bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root_data, data_data = os.urandom(11 * MIB + 7), os.urandom(3 * MIB)
    root = write_disk(tmp_path, 0, root_data)
    data = write_disk(tmp_path, 1, data_data)
    log = tmp_path / "termination-log"
    disks = ["--disk", f"root={root}=vm/ns/t1/root.img", "--disk", f"data={data}=vm/ns/t1/data.img"]
    assert backup(gateway.endpoint, bucket, log, *disks) == 0  # no --region: derived as CDI derives it

    report = read_log(log)
    captured = capsys.readouterr()
    assert json.loads(captured.out) == report
    assert report["result"] == "ok"
    assert report["pruned"] == []
    assert isinstance(report["seconds"], float)
    assert report["disks"] == [
        {
            "name": "root",
            "object": "vm/ns/t1/root.img",
            "sha256": "sha256:" + hashlib.sha256(root_data).hexdigest(),
            "bytes": len(root_data),
        },
        {
            "name": "data",
            "object": "vm/ns/t1/data.img",
            "sha256": "sha256:" + hashlib.sha256(data_data).hexdigest(),
            "bytes": len(data_data),
        },
    ]
    assert gateway.object_file(bucket, "vm/ns/t1/root.img").read_bytes() == root_data
    assert gateway.object_file(bucket, "vm/ns/t1/data.img").read_bytes() == data_data
    assert "backup-disks: disk root: done: 11 MiB" in captured.err
    assert "backup-disks: ok: 2 disks" in captured.err


@pytest.mark.usefixtures("credentials")
def test_prune_deletes_exactly_the_named_keys(
    gateway: s3_server.Gateway, bucket: str, tmp_path: Path
) -> None:
    with gateway.client() as client:
        for key in ("vm/t0/root.img", "vm/t0/data.img", "vm/keep/root.img"):
            client.put_object(bucket, key, b"old backup")
    disk = write_disk(tmp_path, 0, b"new root")
    log = tmp_path / "termination-log"
    prune = ["--prune", "vm/t0/root.img", "--prune", "vm/t0/data.img", "--prune", "vm/never-written.img"]
    assert backup(gateway.endpoint, bucket, log, "--disk", f"root={disk}=vm/t1/root.img", *prune) == 0
    assert read_log(log)["pruned"] == ["vm/t0/root.img", "vm/t0/data.img", "vm/never-written.img"]
    stored = sorted(str(p.relative_to(gateway.root / bucket)) for p in (gateway.root / bucket).rglob("*.img"))
    assert stored == ["vm/keep/root.img", "vm/t1/root.img"]


def test_a_wrong_secret_exits_1_and_nothing_is_pruned(
    gateway: s3_server.Gateway, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with gateway.client() as client:
        client.put_object(bucket, "vm/t0/root.img", b"old backup")
    monkeypatch.setenv(ACCESS_KEY_ENV, s3_server.ACCESS_KEY)
    monkeypatch.setenv(SECRET_KEY_ENV, "not-the-secret")
    disk = write_disk(tmp_path, 0, b"new root")
    log = tmp_path / "termination-log"
    args = ["--disk", f"root={disk}=vm/t1/root.img", "--prune", "vm/t0/root.img"]
    assert backup(gateway.endpoint, bucket, log, *args) == 1
    report = read_log(log)
    assert report["result"] == "error"
    assert report["message"].startswith(f"disk root: uploading to {bucket}/vm/t1/root.img failed: POST ")
    assert "403 SignatureDoesNotMatch" in report["message"]
    assert gateway.object_file(bucket, "vm/t0/root.img").exists()


@pytest.mark.usefixtures("credentials")
def test_another_region_is_refused_by_the_store(
    gateway: s3_server.Gateway, bucket: str, tmp_path: Path
) -> None:
    disk = write_disk(tmp_path, 0, b"root")
    log = tmp_path / "termination-log"
    assert backup(gateway.endpoint, bucket, log, "--region", "us-east-1", "--disk", f"root={disk}=k.img") == 1
    assert "AuthorizationHeaderMalformed" in read_log(log)["message"]


@pytest.mark.usefixtures("credentials")
def test_a_missing_disk_fails_before_anything_is_sent(
    gateway: s3_server.Gateway, bucket: str, tmp_path: Path
) -> None:
    present = write_disk(tmp_path, 0, b"root")
    log = tmp_path / "termination-log"
    missing = tmp_path / "disk-1" / "disk.img"
    disks = ["--disk", f"root={present}=vm/root.img", "--disk", f"data={missing}=vm/data.img"]
    assert backup(gateway.endpoint, bucket, log, *disks) == 1
    message = read_log(log)["message"]
    assert message.startswith(f"disk data: cannot open {missing}: No such file or directory")
    assert [p for p in (gateway.root / bucket).rglob("*") if p.is_file()] == []


@pytest.mark.usefixtures("credentials")
def test_a_directory_is_not_a_disk(gateway: s3_server.Gateway, bucket: str, tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    assert backup(gateway.endpoint, bucket, log, "--disk", f"root={tmp_path}=vm/root.img") == 1
    assert read_log(log)["message"].startswith(
        f"disk root: {tmp_path} is neither a regular file nor a block device"
    )


@pytest.mark.usefixtures("credentials")
def test_an_unreadable_ca_file_is_a_usage_error(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    args = ["--disk", "root=/p=k", "--ca-file", str(tmp_path / "missing-ca.pem")]
    assert backup("https://store:9000", "b", log, *args) == 2
    assert read_log(log)["message"].startswith(f"--ca-file {tmp_path}/missing-ca.pem: cannot load it: ")


def test_sigterm_aborts_the_upload_and_reports_it(
    gateway: s3_server.Gateway, bucket: str, tmp_path: Path
) -> None:
    """The pod deleted mid-upload: the multipart upload is aborted (no parts left) and the log says why."""
    disk = tmp_path / "disk-0" / "disk.img"
    disk.parent.mkdir()
    with disk.open("wb") as handle:
        handle.truncate(1 << 30)  # sparse: reads are fast, but 1 GiB takes seconds to hash and send
    log = tmp_path / "termination-log"
    env = {**os.environ, ACCESS_KEY_ENV: s3_server.ACCESS_KEY, SECRET_KEY_ENV: s3_server.SECRET_KEY}
    command = [sys.executable, "-m", "uds_vm_operator.operator_main", "backup-disks"]
    command += ["--endpoint", gateway.endpoint, "--bucket", bucket, "--part-mib", "5"]
    command += ["--disk", f"root={disk}=vm/root.img", "--termination-log", str(log)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        assert "uploading 1024 MiB" in process.stderr.readline()
        deadline = time.monotonic() + 10
        while not list((gateway.root / bucket / ".sgwtmp").rglob("*")) and time.monotonic() < deadline:
            time.sleep(0.02)  # until the multipart upload exists on the store
        time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "stopped by SIGTERM" in read_log(log)["message"]
    assert [p for p in (gateway.root / bucket).rglob("*") if p.is_file()] == []
