"""A real S3 store for the backup tests: the Versity S3 gateway on a loopback port, objects as plain files.

A helper, not tests. The gateway checks every request's SigV4 signature, signing region and payload sha256,
so a client that signs wrongly fails here as it would against AWS or Ceph. It is built from its Go module by
``tools/s3/build.sh`` (cached in ~/.cache/uds-vm-operator); a failed build fails the tests, never skips them.
Each test module starts its own gateway (one per module, stopped by its PID at the module's end).
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

import pytest

from uds_vm_operator.backup.s3 import S3Client, region_of

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "tools" / "s3" / "build.sh"
ACCESS_KEY = "uds-backup-test"
SECRET_KEY = "uds-backup-test-secret"


@functools.cache
def versitygw_binary() -> Path:
    """Build (or find cached) the gateway with tools/s3/build.sh; fail with its output if it cannot."""
    done = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, check=False, timeout=1800)
    lines = done.stdout.strip().splitlines()
    binary = Path(lines[-1]) if lines else Path()
    if done.returncode != 0 or not binary.is_file():
        pytest.fail(
            f"tools/s3/build.sh failed (exit {done.returncode}); it needs Go and the Go module proxy on "
            f"first use (make install):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
    return binary


@dataclass
class Gateway:
    """A running gateway: its endpoint, signing region and the directory holding its buckets."""

    endpoint: str
    region: str
    root: Path
    log: Path

    def client(self, *, secret_key: str = SECRET_KEY) -> S3Client:
        """A client signing as the gateway's root user (or with another secret, to be refused)."""
        return S3Client(self.endpoint, self.region, ACCESS_KEY, secret_key, timeout_s=30, attempts=1)

    def new_bucket(self) -> str:
        """Create a bucket no other test uses."""
        name = f"backups-{uuid.uuid4().hex[:12]}"
        with self.client() as client:
            client.create_bucket(name)
        return name

    def object_file(self, bucket: str, key: str) -> Path:
        """Where the posix backend keeps an object: ``<root>/<bucket>/<key>``."""
        return self.root / bucket / key

    def logs(self, limit: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-limit:]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_gateway(workdir: Path) -> Iterator[Gateway]:
    """Start the gateway on a free loopback port over ``workdir/root``; stop it (by its PID) on exit.

    Its region is the one CDI v1.65 and ``backup-disks`` derive from ``127.0.0.1:<port>`` ("127"), so the
    command works here without ``--region``, and a request signed for any other region is refused.
    """
    binary = versitygw_binary()
    root = workdir / "root"
    root.mkdir()
    log = workdir / "versitygw.log"
    port = _free_port()
    host = f"127.0.0.1:{port}"
    region = region_of(host)
    command = [str(binary), "--access", ACCESS_KEY, "--secret", SECRET_KEY, "--region", region]
    command += ["--port", host, "posix", str(root)]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    gateway = Gateway(f"http://{host}", region, root, log)
    try:
        deadline = time.monotonic() + 15
        while True:
            if process.poll() is not None:
                pytest.fail(f"versitygw exited ({process.returncode}) at start: {gateway.logs()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"versitygw did not listen on {host} within 15 s: {gateway.logs()}")
                time.sleep(0.05)
        yield gateway
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
