"""Run the Go anchor (``.envtest/bin/go-anchor``, built by ``make go-anchor``) as a real process.

Mirrors ``OperatorProcess`` (tests/integration/operator_harness.py) closely enough that a benchmark can
drive either the same way: start on a free loopback metrics port, count finished reconciles from
controller-runtime's own ``controller_runtime_reconcile_total``, wait until quiet, stop by its own PID.
Waiting until quiet, stopping and reading the log are ``OperatorProcess``'s own: both are an ``OwnedProcess``
(tests/owned_process.py).
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.owned_process import OwnedProcess

ROOT = Path(__file__).resolve().parent.parent
ANCHOR_BIN = ROOT / ".envtest" / "bin" / "go-anchor"


class AnchorError(RuntimeError):
    """The anchor is missing, exited or did not settle; the message says which and carries its log."""


class AnchorProcess(OwnedProcess):
    """One go-anchor serving one namespace."""

    what = "go-anchor"

    def __init__(self, kubeconfig: Path, namespace: str, rendered: Path, log_dir: Path, workers: int = 8):
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.rendered = rendered
        self.log_dir = log_dir
        self.workers = workers
        self.metrics_port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"go-anchor-{self.namespace}-{self.starts}.log"

    def argv(self) -> list[str]:
        """The command line, as a benchmark measuring its start needs it too."""
        return [
            str(ANCHOR_BIN),
            "--kubeconfig",
            str(self.kubeconfig),
            "--namespace",
            self.namespace,
            "--rendered",
            str(self.rendered),
            "--max-workers",
            str(self.workers),
            "--bind-address",
            "127.0.0.1",
            "--metrics-port",
            str(self.metrics_port),
        ]

    def start(self) -> None:
        """Start and wait until its metrics endpoint answers (the manager is running)."""
        from tools.envtest.controlplane import free_loopback_port  # noqa: PLC0415

        if not ANCHOR_BIN.exists():
            raise AnchorError(f"{ANCHOR_BIN} is missing: run `make go-anchor`")
        assert self.process is None, "already running"
        self.starts += 1
        self.metrics_port = free_loopback_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AnchorError(f"go-anchor exited with {self.process.returncode}: {self.logs()}")
            if self._metrics() is not None:
                return
            time.sleep(0.1)
        raise AnchorError(f"go-anchor's metrics did not answer within 60 s: {self.logs()}")

    def not_settled(self, message: str) -> Exception:
        return AnchorError(message)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def _metrics(self) -> str | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10
            ) as answer:
                return str(answer.read().decode())
        except (urllib.error.URLError, OSError):
            return None

    def reconciles(self) -> int:
        """Finished reconciles (any result) since this process started."""
        total = 0.0
        for line in (self._metrics() or "").splitlines():
            if line.startswith("controller_runtime_reconcile_total{"):
                total += float(line.rsplit(" ", 1)[1])
        return int(total)
