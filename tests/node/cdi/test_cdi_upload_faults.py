"""Issue 15 items 4 and 7: cdi-uploadproxy killed mid-upload. The operator never claims the disk verified, and
a retry ends verified, with the whole disk on the volume. And a dropped connection "resumed" by sending only
the rest of the file: CDI takes the rest as a whole image, and the verifier refuses it.

`uds-vmctl upload` goes through a TCP relay in this process (TLS passes through it untouched; the CLI checks
the proxy's certificate with `--tls-server-name`). After HOLD_AFTER_BYTES the relay stops forwarding the
client's bytes. The test waits until CDI's upload server has written part of the image to its scratch volume,
then deletes the cdi-uploadproxy pod(s) with a 1 s grace period. When the killed proxy drops its connection,
the relay resets the client's. The test does not sleep to wait for any of this: each step waits on an event or
on a bounded poll of what the cluster reports.

What CDI v1.65.0 does with the cut stream (read in its source, not assumed):
- `pkg/uploadproxy/uploadproxy.go`: the proxy is an `httputil.ReverseProxy` to the upload server's Service.
  Its process keeps serving after SIGTERM (`cmd/cdi-uploadproxy`: the signal context stops only the cert
  watchers), so the kubelet's SIGKILL after the grace period is what breaks both of its connections.
- `pkg/uploadserver/uploadserver.go`: a body shorter than its Content-Length fails the sync handler with
  "Saving stream failed: ..." (HTTP 500 to a peer that is gone). The handler clears its `uploading` flag and
  the server keeps running: `Run` returns only on a listener error, a successful upload or the deadline. So
  the upload pod is not restarted, and the next POST is accepted.
- `pkg/importer/upload-datasource.go`: a qcow2 goes to scratch first (`tmpimage`), and is converted onto the
  target only after the whole stream has arrived. Each transfer removes the old `tmpimage` first
  (`CleanAll`), so a retry starts from nothing, and a cut qcow2 never reaches the target's `disk.img`. (A raw
  image is written straight to the target, so a cut raw upload leaves a partial `disk.img` until the retry
  truncates it; its DataVolume is not Succeeded, so the operator neither verifies nor boots it.)
- `pkg/controller/datavolume/upload-controller.go`: the DataVolume's phase follows the upload pod only
  (Running and Ready → `UploadReady`, Succeeded → `Succeeded`). CDI has no in-progress phase for an upload, so
  the DataVolume reads `UploadReady` before, during and after the cut.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import select
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.integration.operator_harness import OperatorProcess
from tests.node.cdi.upload_support import DV, PROXY_NAME, VM, prep_and_apply, proxy, succeeded, vmctl_upload
from tests.node.cdi_support import (
    MIB,
    RESTRICTED,
    DiskImage,
    await_verified,
    dv_phase,
    landed_bytes,
    offer_volume,
    running_operator,
    vm_status,
    wait_or_diagnose,
)
from tests.node.node_cluster import NodeHandle
from uds_vm_operator.cli._kube import KubeClient
from uds_vm_operator.cli.upload import request_upload_token
from uds_vm_operator.cli.upload_proxy import ProxyTarget, stream_upload

VIRTUAL_SIZE = 64 * MIB
HOLD_AFTER_BYTES = 8 * MIB
NAMESPACE = "cdi-upfault"  # cdi_ns (conftest) names each test's namespace after it
LABELS = RESTRICTED
PROXY_PODS = "cdi.kubevirt.io=cdi-uploadproxy"  # CDI's component label on the uploadproxy Deployment's pods
UPLOAD_SERVER_PODS = "cdi.kubevirt.io=cdi-upload-server"  # and on the upload server pod of each claim
SCRATCH_FILE = "tmpimage"  # where CDI's upload server writes a stream that needs converting (pkg/importer)
KILL_GRACE_S = 1
RELAY_LIFETIME_S = 900.0


@pytest.fixture
def operator(cdi: NodeHandle, operator_image: str, cdi_ns: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The operator as a host process; its verifier pods run the operator's image on the node."""
    with running_operator(cdi, cdi_ns, tmp_path / "logs", operator_image) as process:
        yield process


def dense_qcow2(folder: Path, virtual_size: int, seed: int) -> DiskImage:
    """A qcow2 whose every cluster holds random data. `make_image` writes mostly zeros, and its qcow2 is about
    1 MiB, so it would be sent before the relay could hold it."""
    raw = random.Random(seed).randbytes(virtual_size)
    folder.mkdir(parents=True, exist_ok=True)
    raw_path, path = folder / f"dense-{seed}.raw", folder / f"dense-{seed}.qcow2"
    raw_path.write_bytes(raw)
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw_path), str(path)], check=True)
    return DiskImage(path, hashlib.sha256(path.read_bytes()).hexdigest(), raw)


# ------------------------------------------------------------------------------------------------ the relay


class HoldingRelay:
    """Relays TCP from 127.0.0.1 (a free port) to `upstream` and stops reading from the client after
    `hold_after_bytes`. When the upstream drops a connection, the relay resets the client's, as a dead proxy's
    kernel would. `held` is set once the limit is reached, `upstream_closed` once the upstream hung up."""

    def __init__(self, upstream: tuple[str, int], hold_after_bytes: int) -> None:
        self.upstream = upstream
        self.hold_after_bytes = hold_after_bytes
        self.forwarded_bytes = 0
        self.held = threading.Event()
        self.upstream_closed = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> HoldingRelay:
        self._spawn(self._accept_loop)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self.cut()
        for thread in self._threads:
            thread.join(timeout=10)
        self._listener.close()

    def cut(self) -> None:
        """Reset every relayed connection (RST to the client, close towards the upstream)."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _reset(sock)

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name="upload-relay", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        deadline = time.monotonic() + RELAY_LIFETIME_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=15)
            except OSError:
                _reset(client)
                continue
            # Blocking from here on: a proxy that pauses reading (its readiness check) must not time us out.
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            self._spawn(self._pump, client, upstream)

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        client_open = True
        deadline = time.monotonic() + RELAY_LIFETIME_S
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:  # select wakes every 0.2 s
                watched = [upstream] + ([client] if client_open and not self.held.is_set() else [])
                readable, _, _ = select.select(watched, [], [], 0.2)
                if upstream in readable:
                    data = _recv(upstream)
                    if not data:
                        self.upstream_closed.set()
                        return
                    client.sendall(data)
                if client in readable:
                    data = _recv(client)
                    if not data:
                        client_open = False
                        upstream.shutdown(socket.SHUT_WR)
                        continue
                    upstream.sendall(data)
                    self.forwarded_bytes += len(data)
                    if self.forwarded_bytes >= self.hold_after_bytes:
                        self.held.set()
        except (OSError, ValueError):  # ValueError: select on a socket that cut() has just closed
            return
        finally:
            _reset(client)
            _reset(upstream)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(256 * 1024)
    except OSError:
        return b""


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets an RST, so a writing client fails at once."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


@contextlib.contextmanager
def held_upload(
    node: NodeHandle, namespace: str, image: Path, url: str, ca: Path
) -> Iterator[tuple[HoldingRelay, Future[subprocess.CompletedProcess[str]]]]:
    """`uds-vmctl upload` of `image` through a HoldingRelay, entered once the relay holds it mid-stream (the
    CLI still running). The relay is left before the CLI's thread is joined: on a failure it resets the held
    connection, so the CLI ends at once."""
    parts = urlsplit(url)
    with (
        ThreadPoolExecutor(max_workers=1) as pool,
        HoldingRelay((parts.hostname or "", parts.port or 443), HOLD_AFTER_BYTES) as relay,
    ):
        upload = pool.submit(vmctl_upload, node, namespace, image, relay.url, ca)
        wait_or_diagnose(
            node, namespace, "the relay to hold the upload", lambda: relay.held.is_set() or upload.done(), 180
        )
        assert not upload.done(), f"the CLI ended before the relay held it: {upload.result().stderr}"
        yield relay, upload


# ---------------------------------------------------------------------------------------------- CDI's side


def claims_offered(node: NodeHandle, namespace: str) -> tuple[Any, Any]:
    """Give CDI's target and scratch claims real volumes; wait until the DataVolume is UploadReady."""
    target = offer_volume(node, namespace, DV)
    scratch: list[Any] = []
    claim = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{DV}-scratch"

    def ready() -> bool:
        if not scratch and node.api.get(claim):
            scratch.append(offer_volume(node, namespace, f"{DV}-scratch"))
        return bool(scratch) and dv_phase(node, namespace, DV) == "UploadReady"

    wait_or_diagnose(node, namespace, f"{DV} UploadReady with its scratch claim bound", ready, 240)
    return target, scratch[0]


def upload_server_pod(node: NodeHandle, namespace: str) -> dict[str, Any]:
    found = node.api.items(f"/api/v1/namespaces/{namespace}/pods", UPLOAD_SERVER_PODS)
    assert len(found) == 1, [p["metadata"]["name"] for p in found]
    return dict(found[0])


def restarts(pod: dict[str, Any]) -> int:
    return sum(int(s.get("restartCount", 0)) for s in pod["status"].get("containerStatuses") or [])


def pod_log(node: NodeHandle, pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return str(node.api.text(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/log"))


def await_cut_stream_rejected(node: NodeHandle, namespace: str, server: dict[str, Any]) -> None:
    """CDI's upload server failed the cut stream (and, per its code, keeps serving for the next POST)."""
    wait_or_diagnose(
        node,
        namespace,
        "CDI's upload server to reject the cut stream",
        lambda: "Saving stream failed" in pod_log(node, server),
        120,
    )


def scratch_bytes(scratch: Any) -> int:
    path = Path(scratch.mount_point) / SCRATCH_FILE
    return path.stat().st_size if path.is_file() else 0


def proxy_pods(node: NodeHandle) -> list[dict[str, Any]]:
    return list(node.api.items("/api/v1/namespaces/cdi/pods", PROXY_PODS))


def kill_proxy_pods(node: NodeHandle) -> set[str]:
    """Delete each cdi-uploadproxy pod with a 1 s grace period (SIGTERM, then SIGKILL); returns their UIDs."""
    pods = proxy_pods(node)
    assert pods, "CDI runs no cdi-uploadproxy pod"
    for pod in pods:
        node.api.call(
            "DELETE",
            f"/api/v1/namespaces/cdi/pods/{pod['metadata']['name']}",
            {"gracePeriodSeconds": KILL_GRACE_S, "propagationPolicy": "Background"},
            expect=(200, 202, 404),
        )
    return {pod["metadata"]["uid"] for pod in pods}


def new_proxy_ready(node: NodeHandle, killed: set[str]) -> bool:
    """The killed pods are gone from the API, and a new one is Running and Ready."""
    pods = proxy_pods(node)
    if any(p["metadata"]["uid"] in killed for p in pods):
        return False
    statuses = [s for p in pods for s in p["status"].get("containerStatuses") or []]
    return (
        bool(pods)
        and all(p["status"].get("phase") == "Running" for p in pods)
        and all(s.get("ready") for s in statuses)
    )


def proxy_answers(url: str, ca: Path) -> bool:
    """GET /healthz through the Service, TLS checked as the CLI checks it: kube-proxy reaches a live proxy."""
    parts = urlsplit(url)
    context = ssl.create_default_context(cafile=str(ca))
    request = f"GET /healthz HTTP/1.1\r\nHost: {PROXY_NAME}\r\nConnection: close\r\n\r\n".encode()
    try:
        with (
            socket.create_connection((parts.hostname or "", parts.port or 443), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=PROXY_NAME) as tls,
        ):
            tls.sendall(request)
            return tls.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def not_verified(status: dict[str, Any], moment: str) -> None:
    """The operator waits for the image and claims nothing."""
    assert status.get("phase") == "WaitingForUpload", (moment, status)
    assert status.get("checksumVerified") is False and not status.get("verifiedBy"), (moment, status)
    assert not status.get("verifiedDigest"), (moment, status)
    checksum = [c for c in status.get("conditions") or [] if c["type"] == "ChecksumVerified"]
    assert [c["status"] for c in checksum] == ["False"], (moment, status)


# ------------------------------------------------------------------------------------------------ the test


@pytest.mark.timeout(1200)
def test_killing_the_upload_proxy_mid_upload_claims_nothing_and_a_retry_ends_verified(
    cdi: NodeHandle, operator: OperatorProcess, cdi_ns: str, tmp_path: Path
) -> None:
    image = dense_qcow2(tmp_path / "img", VIRTUAL_SIZE, seed=7)
    size = image.path.stat().st_size
    assert size > 4 * HOLD_AFTER_BYTES, "the image is large enough to be cut well before its end"
    report = prep_and_apply(cdi, cdi_ns, image.path, tmp_path / "out")
    assert report["content_sha256"] == "sha256:" + image.raw_sha256
    target, scratch = claims_offered(cdi, cdi_ns)
    url, ca = proxy(cdi, tmp_path)

    def waiting() -> dict[str, Any] | None:
        status = vm_status(cdi, cdi_ns, VM)
        return status if status.get("phase") == "WaitingForUpload" else None

    before = wait_or_diagnose(cdi, cdi_ns, "the operator to report WaitingForUpload", waiting, 120)
    not_verified(before, "before the upload")
    server = upload_server_pod(cdi, cdi_ns)

    # 1. The upload through the relay, held after HOLD_AFTER_BYTES, then the proxy killed under it.
    with held_upload(cdi, cdi_ns, image.path, url, ca) as (relay, upload):
        wait_or_diagnose(
            cdi,
            cdi_ns,
            "CDI's upload server writing the stream to scratch",
            lambda: scratch_bytes(scratch) >= HOLD_AFTER_BYTES // 2,
            120,
        )
        assert dv_phase(cdi, cdi_ns, DV) == "UploadReady", "CDI has no in-progress phase for an upload"
        not_verified(vm_status(cdi, cdi_ns, VM), "mid-upload")

        assert not relay.upstream_closed.is_set(), "the proxy still holds the connection, mid-upload"
        killed = kill_proxy_pods(cdi)
        wait_or_diagnose(
            cdi, cdi_ns, "the killed proxy to drop the relayed connection", relay.upstream_closed.is_set, 120
        )
        interrupted = upload.result(timeout=180)

    # 2. Right after the cut: a clear failure from the CLI, nothing claimed, nothing truncated on the target.
    assert interrupted.returncode == 1, interrupted.stderr
    assert "interrupted before CDI confirmed it" in interrupted.stderr, interrupted.stderr
    assert f"of {size} bytes sent" in interrupted.stderr, interrupted.stderr
    assert "re-run the same command" in interrupted.stderr, interrupted.stderr
    await_cut_stream_rejected(cdi, cdi_ns, server)
    after = upload_server_pod(cdi, cdi_ns)
    assert after["metadata"]["uid"] == server["metadata"]["uid"], "CDI kept the same upload server pod"
    assert restarts(after) == 0 and after["status"].get("phase") == "Running", after["status"]
    assert dv_phase(cdi, cdi_ns, DV) == "UploadReady", "CDI accepts the image again, not Succeeded"
    assert not (Path(target.mount_point) / "disk.img").exists(), "the cut qcow2 never reached the target"
    not_verified(vm_status(cdi, cdi_ns, VM), "after the cut")

    # 3. CDI's Deployment brings a new proxy; once the Service routes to it, the same command again.
    wait_or_diagnose(cdi, "cdi", "a new cdi-uploadproxy pod Ready", lambda: new_proxy_ready(cdi, killed), 180)
    wait_or_diagnose(cdi, cdi_ns, "the Service routing to the new proxy", lambda: proxy_answers(url, ca), 60)
    retried = vmctl_upload(cdi, cdi_ns, image.path, url, ca)
    assert retried.returncode == 0, retried.stderr
    assert "local digest matches" in retried.stderr and f"uploaded {size} bytes" in retried.stderr
    succeeded(cdi, cdi_ns)
    status = await_verified(cdi, cdi_ns, VM, "the verifier's verdict after the retry", 240)
    assert status["verifiedBy"] == "in-cluster-verifier"
    assert status["verifiedDigest"] == report["sha256"]
    assert landed_bytes(target, VIRTUAL_SIZE) == image.raw, "the retried upload left the whole disk"


@pytest.mark.timeout(1200)
def test_an_upload_resumed_after_a_dropped_connection_is_caught_never_a_silently_wrong_disk(
    cdi: NodeHandle, operator: OperatorProcess, cdi_ns: str, tmp_path: Path
) -> None:
    """CDI's upload server cannot resume a byte stream: each POST's body is read from its first byte as the
    whole image (pkg/uploadserver; its `ProcessDataResume` resumes processing after an async upload, not
    bytes). A client that "resumes" after a dropped connection by sending only the bytes it had not sent yet
    hands CDI another image. `uds-vmctl upload` never does that (it says to re-run the whole upload, proven
    above); a virtctl-style client could. What must hold: the disk that lands is never taken for the image,
    and the VM never runs."""
    image = dense_qcow2(tmp_path / "img", VIRTUAL_SIZE, seed=11)
    report = prep_and_apply(cdi, cdi_ns, image.path, tmp_path / "out")
    target, _ = claims_offered(cdi, cdi_ns)
    url, ca = proxy(cdi, tmp_path)
    server = upload_server_pod(cdi, cdi_ns)

    # 1. The connection drops mid-upload (the relay resets both sides; the proxy itself stays up).
    with held_upload(cdi, cdi_ns, image.path, url, ca) as (relay, upload):
        relay.cut()
        interrupted = upload.result(timeout=180)
    assert interrupted.returncode == 1, interrupted.stderr
    assert "interrupted before CDI confirmed it" in interrupted.stderr, interrupted.stderr
    await_cut_stream_rejected(cdi, cdi_ns, server)
    not_verified(vm_status(cdi, cdi_ns, VM), "after the drop")

    # 2. The "resume": the rest of the file, from where the client stopped, with a fresh token.
    rest = tmp_path / "rest-of-image.bin"
    rest.write_bytes(image.path.read_bytes()[HOLD_AFTER_BYTES:])
    cluster = KubeClient(cdi.kubeconfig)
    try:
        token = request_upload_token(cluster, cdi_ns, DV)
    finally:
        cluster.close()
    sent = stream_upload(ProxyTarget(url, str(ca), server_name=PROXY_NAME), token, rest)
    assert sent == rest.stat().st_size
    succeeded(cdi, cdi_ns)

    # 3. CDI took the rest as a whole raw image; the operator's verifier refuses it and the VM never runs.
    def failed() -> dict[str, Any] | None:
        status = vm_status(cdi, cdi_ns, VM)
        return status if status.get("phase") == "Failed" else None

    status = wait_or_diagnose(cdi, cdi_ns, "the verifier's verdict on the resumed disk", failed, 240)
    assert status["checksumVerified"] is False and not status.get("verifiedBy"), status
    mismatch = next(c for c in status["conditions"] if c["type"] == "ChecksumVerified")
    assert mismatch["reason"] == "ChecksumMismatch", mismatch
    assert report["content_sha256"] in mismatch["message"], "measured against the digest prep sealed"
    assert landed_bytes(target, VIRTUAL_SIZE) != image.raw, "the landed disk is not the image"
    vm = cdi.api.get(f"/apis/kubevirt.io/v1/namespaces/{cdi_ns}/virtualmachines/{VM}") or {}
    assert vm.get("spec", {}).get("runStrategy") == "Halted", "the VM never started"
