"""Helpers of the real-CDI tests: disk images made in the test, an HTTP server the importer pods can reach,
and real volumes handed to the claims CDI creates.

Nothing here plays CDI. CDI's controller creates the claims (the target, and the scratch claim its HTTP
importer needs), the importer pod downloads, checks the checksum and converts; the tests only offer each
claim a static local PV of exactly the size that claim asks for, as a provisioner would.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import lzma
import os
import random
import re
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node_cluster import NodeHandle, wait_until

ROOT = Path(__file__).resolve().parents[2]
NODE_ADDRESS = "10.244.0.1"  # the node's bridge address: importer pods reach it, not the host's loopback
MIB = 1024 * 1024
CDI_API = "/apis/cdi.kubevirt.io/v1beta1"


def ensure_cdi(node: NodeHandle) -> None:
    """`make cdi-up` for this node (idempotent): CDI's images pushed, cdi-operator and a CDI resource."""
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "cdi" / "install.py"), "--state-dir", str(node.state_dir)],
        check=True,
    )


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
        subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", *extra, str(raw_path), str(path)], check=True)
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

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
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


@contextmanager
def image_server(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve `folder` on the node's bridge address (a free port); yields the base URL and the request log."""

    def handler(*args: Any) -> _Handler:
        return _Handler(*args, directory=str(folder))

    server = _Server((NODE_ADDRESS, 0), handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, name="cdi-image-server", daemon=True)
    thread.start()
    try:
        yield f"http://{NODE_ADDRESS}:{server.server_address[1]}", server.requests
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------------------------------------ volumes


def claim_request(pvc: dict[str, Any]) -> int:
    """The byte count a claim asks for (CDI writes plain integers or binary suffixes)."""
    text = str(pvc["spec"]["resources"]["requests"]["storage"])
    units = {"Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB, "Ti": 1024 * 1024 * MIB}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def offer_volume(node: NodeHandle, namespace: str, claim: str, filesystem: str = "ext4", timeout_s: float = 120.0) -> Any:
    """Wait for CDI's claim `claim`, then give it a real volume of exactly the size it requests."""
    pvc = wait_until(
        f"PVC {namespace}/{claim}",
        lambda: node.api.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}"),
        timeout_s,
    )
    mode = pvc["spec"].get("volumeMode") or "Filesystem"
    return node.volume(claim_request(pvc), mode, filesystem, claim=(namespace, claim))  # type: ignore[arg-type]


def landed_bytes(volume: Any, length: int) -> bytes:
    """The first `length` bytes of the disk CDI wrote (disk.img on Filesystem, the device on Block)."""
    source = Path(volume.mount_point) / "disk.img" if volume.mount_point else Path(volume.device)
    with open(source, "rb") as handle:
        return handle.read(length)


def datavolume(node: NodeHandle, namespace: str, name: str) -> dict[str, Any] | None:
    return node.api.get(f"{CDI_API}/namespaces/{namespace}/datavolumes/{name}")


def dv_condition(dv: dict[str, Any], kind: str) -> dict[str, Any]:
    for condition in (dv.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(MIB), b""):
            digest.update(chunk)
    return digest.hexdigest()


def disk_size_on(volume: Any) -> int:
    """How large CDI left disk.img (it grows the image to the space it may use on Filesystem volumes)."""
    return os.path.getsize(Path(volume.mount_point) / "disk.img")
