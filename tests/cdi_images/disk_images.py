"""Disk images made in a test with real tools, and an HTTP server for them that CDI's importer accepts.

Shared by the CDI worker-image tier (tests/cdi_images: the importer run in its image, no cluster) and the
real-node tier (tests/node/cdi/test_cdi_*: CDI's importer pods on the node fetch from the node's bridge
address).
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import lzma
import random
import re
import socketserver
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


# ------------------------------------------------------------------------------------------------ images


@dataclass(frozen=True)
class DiskImage:
    """One image file as served, the digest of the served bytes, and the digest of the raw disk it holds."""

    path: Path
    served_sha256: str
    raw: bytes

    @property
    def raw_sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()


def raw_disk(virtual_size: int, seed: int) -> bytes:
    """A raw disk with data at its start, its middle and its end, and zeros between (sparse when stored)."""
    rng = random.Random(seed)
    disk = bytearray(virtual_size)
    for offset in (0, virtual_size // 2, virtual_size - MIB):
        disk[offset : offset + 256 * 1024] = rng.randbytes(256 * 1024)
    return bytes(disk)


def make_image(folder: Path, fmt: str, virtual_size: int, seed: int = 1) -> DiskImage:
    """Write the disk in `fmt` (raw, qcow2, qcow2c = compressed clusters, raw.gz, raw.xz) with real tools."""
    raw = raw_disk(virtual_size, seed)
    folder.mkdir(parents=True, exist_ok=True)
    raw_path = folder / f"disk-{seed}.raw"
    raw_path.write_bytes(raw)
    if fmt == "raw":
        path = raw_path
    elif fmt in ("qcow2", "qcow2c"):
        path = folder / f"disk-{seed}-{fmt}.qcow2"
        extra = ["-c"] if fmt == "qcow2c" else []
        subprocess.run(
            ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", *extra, str(raw_path), str(path)], check=True
        )
    elif fmt == "raw.gz":
        path = folder / f"disk-{seed}.raw.gz"
        path.write_bytes(gzip.compress(raw, compresslevel=1))
    elif fmt == "raw.xz":
        path = folder / f"disk-{seed}.raw.xz"
        path.write_bytes(lzma.compress(raw, preset=0))
    else:
        raise ValueError(fmt)
    return DiskImage(path, hashlib.sha256(path.read_bytes()).hexdigest(), raw)


# ----------------------------------------------------------------------------------------- image server

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files with HEAD, Content-Length and single byte ranges (nbdkit's curl plugin asks for both)."""

    def log_message(self, format: str, *args: Any) -> None:
        self.server.requests.append(self.requestline)  # type: ignore[attr-defined]

    def send_head(self) -> Any:
        match = _RANGE.match(self.headers.get("Range", ""))
        path = Path(self.translate_path(self.path))
        if match is None or not path.is_file():
            return super().send_head()
        size = path.stat().st_size
        start = int(match.group(1))
        end = min(int(match.group(2)) if match.group(2) else size - 1, size - 1)
        handle = open(path, "rb")  # noqa: SIM115 - copyfile closes it
        handle.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        return _Limited(handle, end - start + 1)

    def end_headers(self) -> None:
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def copyfile(self, source: Any, outputfile: Any) -> None:
        """Send the body in 1 MiB pieces, pausing `pause_per_mib_s` after each (0: at full speed), so a
        fault test can act while CDI's importer is still downloading."""
        pause = float(getattr(self.server, "pause_per_mib_s", 0.0))
        while chunk := source.read(MIB):
            outputfile.write(chunk)
            if pause:
                time.sleep(pause)


class _Limited:
    """A file object that yields only `left` bytes, for a range response."""

    def __init__(self, handle: Any, left: int) -> None:
        self._handle, self._left = handle, left

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        chunk = self._handle.read(self._left if size < 0 else min(size, self._left))
        self._left -= len(chunk)
        return bytes(chunk)

    def close(self) -> None:
        self._handle.close()


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    requests: list[str]
    pause_per_mib_s: float

    def handle_error(self, request: Any, client_address: Any) -> None:
        """nbdkit and qemu-img drop connections once they have read what they need: not an error here."""


@contextmanager
def image_server(folder: Path, address: str, pause_per_mib_s: float = 0.0) -> Iterator[tuple[str, list[str]]]:
    """Serve `folder` on `address` (a free port); yields the base URL and the request log."""

    def handler(*args: Any) -> _Handler:
        return _Handler(*args, directory=str(folder))

    server = _Server((address, 0), handler)
    server.requests = []
    server.pause_per_mib_s = pause_per_mib_s
    thread = threading.Thread(target=server.serve_forever, name="cdi-image-server", daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.server_address[1]}", server.requests
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------------------------------- volumes


@contextmanager
def real_volume(workdir: Path, size_bytes: int, filesystem: str) -> Iterator[Path]:
    """A filesystem of exactly `size_bytes` on a loop device (as a local PV of that capacity would be)."""
    backing, mount = workdir / f"{filesystem}.img", workdir / f"{filesystem}-mnt"
    with open(backing, "wb") as handle:
        handle.truncate(size_bytes)
    device = subprocess.run(
        ["losetup", "--find", "--show", str(backing)], capture_output=True, text=True, check=True
    )
    loop = device.stdout.strip()
    try:
        mkfs = ["mkfs.ext4", "-q", "-F", "-m", "0"] if filesystem == "ext4" else ["mkfs.xfs", "-q", "-f"]
        subprocess.run([*mkfs, loop], check=True, capture_output=True)
        mount.mkdir()
        subprocess.run(["mount", loop, str(mount)], check=True)
        try:
            yield mount
        finally:
            subprocess.run(["umount", str(mount)], check=True)
    finally:
        subprocess.run(["losetup", "--detach", loop], check=True)
