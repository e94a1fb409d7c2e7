"""The backup tiers' S3 store: Versity's S3 gateway (tools/s3) on a free port, objects kept as plain files.

One way to start it for the unit tests (tests/unit/s3_server.py), the real-node test (on the node's bridge
address, where pods reach it) and the backup benchmark. The gateway checks every request's SigV4 signature,
signing region and payload sha256, so a client that signs wrongly fails here as it would against AWS or Ceph.
Its region is the one CDI v1.65 and ``backup-disks`` derive from ``<address>:<port>``
(``backup.s3.region_of``), so neither needs ``--region``. No pytest here: failures raise RuntimeError.
"""

from __future__ import annotations

import functools
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from uds_vm_operator.backup.s3 import S3Client, region_of

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "tools" / "s3" / "build.sh"
ACCESS_KEY = "uds-backup-test"
SECRET_KEY = "uds-backup-test-secret"
START_TIMEOUT_S = 15.0


@functools.cache
def versitygw_binary() -> Path:
    """Build (or reuse) the gateway with tools/s3/build.sh; RuntimeError with its output if it cannot."""
    done = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, check=False, timeout=1800)
    lines = done.stdout.strip().splitlines()
    binary = Path(lines[-1]) if lines else Path()
    if done.returncode != 0 or not binary.is_file():
        raise RuntimeError(
            f"tools/s3/build.sh failed (exit {done.returncode}); it needs Go and the Go module proxy on "
            f"first use (make install):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
    return binary


@dataclass(frozen=True)
class Gateway:
    """A running gateway: its PID, endpoint, signing region and the directory holding its buckets."""

    pid: int
    version: str
    endpoint: str
    region: str
    root: Path
    log: Path

    def client(self, *, secret_key: str = SECRET_KEY) -> S3Client:
        """A client signing as the gateway's root user (or with another secret, to be refused)."""
        return S3Client(self.endpoint, self.region, ACCESS_KEY, secret_key, timeout_s=60, attempts=1)

    def new_bucket(self, name: str | None = None) -> str:
        """Create a bucket (by default one no other test uses) and return its name."""
        name = name or f"backups-{uuid.uuid4().hex[:12]}"
        with self.client() as client:
            client.create_bucket(name)
        return name

    def object_file(self, bucket: str, key: str) -> Path:
        """Where the posix backend keeps an object: ``<root>/<bucket>/<key>``."""
        return self.root / bucket / key

    def logs(self, limit: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-limit:]


def free_port(address: str) -> int:
    """A TCP port nothing listens on at ``address`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_gateway(workdir: Path, *, address: str = "127.0.0.1") -> Iterator[Gateway]:
    """Start the gateway on a free port of ``address`` over ``workdir/root``; stop it (by its PID) on exit."""
    binary = versitygw_binary()
    root = workdir / "root"
    root.mkdir()
    log = workdir / "versitygw.log"
    port = free_port(address)
    host = f"{address}:{port}"
    region = region_of(host)
    command = [str(binary), "--access", ACCESS_KEY, "--secret", SECRET_KEY, "--region", region]
    command += ["--port", host, "posix", str(root)]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    version = binary.parent.parent.name.removeprefix("versitygw-")  # .../versitygw-<version>/bin
    gateway = Gateway(process.pid, version, f"http://{host}", region, root, log)
    try:
        _wait_listening(process, gateway, address, port)
        yield gateway
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _wait_listening(process: subprocess.Popen[bytes], gateway: Gateway, address: str, port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"versitygw exited ({process.returncode}) at start: {gateway.logs()}")
        try:
            socket.create_connection((address, port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"versitygw did not listen on {address}:{port} within {START_TIMEOUT_S:.0f} s: "
                    f"{gateway.logs()}"
                ) from None
            time.sleep(0.05)
