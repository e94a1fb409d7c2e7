"""Copy a VM's disks to S3, each with the sha256 of the bytes sent, then prune the backups they replace.

Why the order: every disk is opened before any byte is sent (a missing disk fails the run at once, naming
it), and old backups are deleted only after every new one is complete, so a failed run never leaves a VM
with fewer backups than it had. The result is one small JSON document, which the operator reads from the
pod's termination message (Kubernetes keeps at most 4096 bytes of it).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO, TextIO

from uds_vm_operator.backup.s3 import S3Client, S3Error

TERMINATION_MESSAGE_LIMIT = 4096
"""Bytes of a termination message Kubernetes keeps; both documents must fit."""
MESSAGE_LIMIT = 1000
_MIB = 1 << 20


class BackupUsageError(ValueError):
    """The arguments cannot work (exit code 2): nothing was read or sent."""


class BackupError(Exception):
    """The backup failed (exit code 1); the message names the disk or key and what to check."""


@dataclass(frozen=True)
class DiskSpec:
    """One disk to back up: its name in the VM, where the pod sees it, and the object key to write."""

    name: str
    path: str
    key: str


@dataclass(frozen=True)
class UploadedDisk:
    """A disk now stored as ``key``: ``sha256`` is the hex digest of its ``size`` bytes."""

    name: str
    key: str
    sha256: str
    size: int


@dataclass(frozen=True)
class BackupResult:
    """What the copier did, as the termination message reports it."""

    disks: tuple[UploadedDisk, ...]
    seconds: float
    pruned: tuple[str, ...]

    def to_json(self) -> str:
        """The ``result: ok`` document (compact: it must fit the termination message)."""
        disks = [
            {"name": d.name, "object": d.key, "sha256": f"sha256:{d.sha256}", "bytes": d.size}
            for d in self.disks
        ]
        document = {
            "result": "ok",
            "disks": disks,
            "seconds": round(self.seconds, 3),
            "pruned": list(self.pruned),
        }
        return _compact(document)


def error_json(message: str) -> str:
    """The ``result: error`` document: the message on one line, cut to 1000 characters and to what fits."""
    text = " ".join(message.split())
    limit = MESSAGE_LIMIT
    while True:
        cut = text if len(text) <= limit else text[: limit - 3] + "..."
        document = _compact({"result": "error", "message": cut})
        if len(document.encode()) < TERMINATION_MESSAGE_LIMIT or limit <= 10:
            return document
        limit = limit * 3 // 4


def _compact(document: object) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def parse_disk(text: str) -> DiskSpec:
    """Parse ``NAME=PATH=KEY``; none of the three may be empty or contain ``=``."""
    parts = text.split("=")
    if len(parts) != 3 or not all(parts):
        raise BackupUsageError(f"--disk {text!r} must be NAME=PATH=KEY, each non-empty and without '='")
    return DiskSpec(*parts)


def check_plan(disks: Sequence[DiskSpec], prune: Sequence[str]) -> None:
    """Refuse plans that cannot end well before anything is read or sent.

    A prune key that is also a disk's key would delete the backup just written; two disks with one key
    would overwrite each other; and a result that cannot fit the termination message would be cut off
    after the work was done.
    """
    if not disks:
        raise BackupUsageError("give at least one --disk NAME=PATH=KEY")
    for attribute in ("name", "key"):
        values = [getattr(disk, attribute) for disk in disks]
        repeated = sorted({value for value in values if values.count(value) > 1})
        if repeated:
            raise BackupUsageError(f"two --disk arguments share the {attribute} {repeated[0]!r}")
    keys = {disk.key for disk in disks}
    for key in prune:
        if not key:
            raise BackupUsageError("--prune needs a non-empty object key")
        if key in keys:
            raise BackupUsageError(f"--prune {key!r} is also a --disk key: it would delete the new backup")
    largest = BackupResult(
        tuple(UploadedDisk(d.name, d.key, "f" * 64, (1 << 63) - 1) for d in disks), 1e9, tuple(prune)
    )
    size = len(largest.to_json().encode())
    if size >= TERMINATION_MESSAGE_LIMIT:
        raise BackupUsageError(
            f"the result for {len(disks)} disks and {len(prune)} pruned keys could take {size} bytes, more "
            f"than the {TERMINATION_MESSAGE_LIMIT}-byte termination message holds; use shorter keys or fewer "
            "disks per pod"
        )


def open_disk(disk: DiskSpec) -> tuple[BinaryIO, int]:
    """Open a disk image file or block device for reading; return it with its size in bytes.

    Why seek for block devices: their ``st_size`` is 0, and seeking to the end is how a device tells its
    size (seeking back afterwards, or the first read would return nothing).
    """
    try:
        fd = os.open(disk.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise BackupError(
            f"disk {disk.name}: cannot open {disk.path}: {exc.strerror}; check that its volume is mounted "
            "in the backup pod and readable"
        ) from exc
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            size = info.st_size
        elif stat.S_ISBLK(info.st_mode):
            size = os.lseek(fd, 0, os.SEEK_END)
            os.lseek(fd, 0, os.SEEK_SET)
        else:
            raise BackupError(
                f"disk {disk.name}: {disk.path} is neither a regular file nor a block device; point the "
                "--disk PATH at disk.img on a filesystem volume or at the block device"
            )
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        return os.fdopen(fd, "rb"), size
    except BaseException:
        os.close(fd)
        raise


class Progress:
    """Progress of one disk on stderr: percent and MiB/s, at most once per ``interval_s``."""

    def __init__(
        self,
        disk: DiskSpec,
        total: int,
        *,
        out: TextIO,
        interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.disk = disk
        self.total = total
        self.done = 0
        self._out = out
        self._interval_s = interval_s
        self._clock = clock
        self._started = clock()
        self._last = self._started

    def part_sent(self, count: int) -> None:
        """Count a part the store now has; print a line if the last one is ``interval_s`` old."""
        self.done += count
        now = self._clock()
        if now - self._last >= self._interval_s and self.done < self.total:
            self._last = now
            percent = 100 * self.done / self.total
            self._print(
                f"{percent:.0f}% ({self.done / _MIB:.0f} of {self.total / _MIB:.0f} MiB) at {self._rate(now)}"
            )

    def finished(self, sha256: str) -> None:
        """Print the disk's last line: size, time, rate and digest."""
        now = self._clock()
        seconds = now - self._started
        self._print(
            f"done: {self.total / _MIB:.0f} MiB in {seconds:.1f} s at {self._rate(now)}, sha256:{sha256}"
        )

    def _rate(self, now: float) -> str:
        return f"{self.done / _MIB / max(now - self._started, 1e-9):.0f} MiB/s"

    def _print(self, text: str) -> None:
        print(f"backup-disks: disk {self.disk.name}: {text}", file=self._out, flush=True)


def back_up(
    client: S3Client,
    bucket: str,
    disks: Sequence[DiskSpec],
    prune: Sequence[str],
    *,
    part_bytes: int,
    out: TextIO | None = None,
    progress_interval_s: float = 5.0,
) -> BackupResult:
    """Upload every disk, then delete the ``prune`` keys; raise BackupError naming what failed.

    Objects already written when a later disk fails are left in place (the operator knows their keys and
    retries or removes them); nothing is pruned unless every disk was uploaded.
    """
    out = out or sys.stderr  # looked up per call: a caller (or a test) may have replaced sys.stderr
    check_plan(disks, prune)
    started = time.monotonic()
    opened: list[tuple[DiskSpec, BinaryIO, int]] = []
    try:
        for disk in disks:
            reader, size = open_disk(disk)
            opened.append((disk, reader, size))
        uploaded = [
            _upload(
                client,
                bucket,
                disk,
                reader,
                size,
                part_bytes=part_bytes,
                out=out,
                interval_s=progress_interval_s,
            )
            for disk, reader, size in opened
        ]
    finally:
        for _, reader, _ in opened:
            reader.close()
    pruned: list[str] = []
    for key in prune:
        try:
            client.delete_object(bucket, key)
        except S3Error as exc:
            if exc.code != "NoSuchKey":
                raise BackupError(
                    f"all {len(uploaded)} disks were uploaded, but pruning {bucket}/{key} failed: {exc}"
                ) from exc
        pruned.append(key)
        print(f"backup-disks: pruned {bucket}/{key}", file=out, flush=True)
    return BackupResult(tuple(uploaded), time.monotonic() - started, tuple(pruned))


def _upload(
    client: S3Client,
    bucket: str,
    disk: DiskSpec,
    reader: BinaryIO,
    size: int,
    *,
    part_bytes: int,
    out: TextIO,
    interval_s: float,
) -> UploadedDisk:
    where = f"from {disk.path} to {bucket}/{disk.key}"
    print(f"backup-disks: disk {disk.name}: uploading {size / _MIB:.0f} MiB {where}", file=out, flush=True)
    progress = Progress(disk, size, out=out, interval_s=interval_s)
    try:
        digest = client.upload_stream(
            bucket, disk.key, reader, size, part_bytes=part_bytes, on_part=progress.part_sent
        )
    except S3Error as exc:
        raise BackupError(f"disk {disk.name}: uploading to {bucket}/{disk.key} failed: {exc}") from exc
    except EOFError as exc:
        raise BackupError(
            f"disk {disk.name}: {disk.path} is shorter than the {size} bytes it held when opened ({exc}); "
            "was the disk in use? back up a stopped VM"
        ) from exc
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise BackupError(f"disk {disk.name}: reading {disk.path} failed: {reason}") from exc
    progress.finished(digest)
    return UploadedDisk(disk.name, disk.key, digest, size)
