"""Real CDI on the real node: how long CDI takes to land a 2 GiB image, and what the operator's verifier adds.

A 2 GiB raw image of random bytes (nothing sparse to skip) is prepped with `uds-vmctl prep`, declared as an
upload, and streamed with `uds-vmctl upload` to the real cdi-uploadproxy; CDI's upload server writes it onto a
static local ext4 PV of exactly the operator's PVC size. Measured:

- `cdi_import_s`: from the start of the upload until the DataVolume is `Succeeded` (CDI's part);
- `verifier_added_s`: from `Succeeded` until the operator reports `checksumVerified` (scheduling the verifier
  pod, pulling nothing (the image is on the node), hashing 2 GiB, recording the verdict);
- on the same volume afterwards, page cache dropped each time: `uds-vm-operator verify-disk` (the verifier's
  own command) against `openssl dgst -sha256`, six rounds in alternating order, and the ratio of their median
  read rates.

Needs root and the real node: it reuses the healthy node of UDS_NODE_STATE_DIR (or .envtest), else starts one
there and stops it at the end. CDI is installed with tools/cdi/install.py (idempotent).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.page_cache import timed_from_disk
from tests.integration.operator_harness import OperatorProcess
from tests.node.cdi_support import dv_phase, offer_volume, vm_status
from tests.node.node_cluster import load_handle, push_operator_image, wait_until
from tools.node import node as node_launcher

ROOT = Path(__file__).resolve().parents[1]

SIZE = 2 << 30
ROUNDS = 6
VM = "bench"
DV = f"{VM}-dv"


def _vmctl(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "uds_vm_operator.cli.main", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True)


def _measure(handle: Any, namespace: str, work: Path) -> dict[str, Any]:
    image = work / "bench.raw"
    with open(image, "wb") as out:
        for _ in range(SIZE >> 24):
            out.write(os.urandom(16 << 20))
    report = json.loads(
        _vmctl("prep", str(image), "--name", VM, "-n", namespace, "-o", str(work), "--json").stdout
    )
    record = yaml.safe_load((work / f"{VM}.image-record.configmap.yaml").read_text(encoding="utf-8"))
    handle.api.apply(record, f"/api/v1/namespaces/{namespace}/configmaps/{record['metadata']['name']}")
    vm = yaml.safe_load((work / f"{VM}.udsvm.yaml").read_text(encoding="utf-8"))
    vm["spec"]["disk"].update({"storageClassName": "udsvm-local", "volumeMode": "Filesystem"})
    handle.api.apply(vm, f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines/{VM}")
    volume = offer_volume(handle, namespace, DV)
    scratch: list[Any] = []

    def upload_ready() -> bool:
        # CDI's upload server asks for a scratch claim too; it gets a real volume of its requested size.
        claim = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{DV}-scratch"
        if not scratch and handle.api.get(claim):
            scratch.append(offer_volume(handle, namespace, f"{DV}-scratch"))
        return dv_phase(handle, namespace, DV) == "UploadReady"

    wait_until("UploadReady", upload_ready, 600, 1.0)
    service = handle.api.get("/api/v1/namespaces/cdi/services/cdi-uploadproxy")
    bundle = handle.api.get("/api/v1/namespaces/cdi/configmaps/cdi-uploadproxy-signer-bundle")
    ca = work / "ca.pem"
    ca.write_text(bundle["data"]["ca-bundle.crt"], encoding="utf-8")
    started = time.monotonic()
    _vmctl(
        "upload", str(image), "--name", VM, "-n", namespace, "--kubeconfig", str(handle.kubeconfig),
        "--uploadproxy-url", f"https://{service['spec']['clusterIP']}:443", "--ca-file", str(ca),
        "--tls-server-name", "cdi-uploadproxy.cdi.svc",
    )  # fmt: skip
    wait_until("Succeeded", lambda: dv_phase(handle, namespace, DV) == "Succeeded", 1800, 0.5)
    imported = time.monotonic()
    status = wait_until(
        "checksumVerified",
        lambda: (s := vm_status(handle, namespace, VM)).get("checksumVerified") and s,
        1800,
        0.5,
    )
    verified = time.monotonic()
    disk = str(volume.mount_point / "disk.img")
    verifier = str(Path(sys.executable).with_name("uds-vm-operator"))
    ours = [verifier, "verify-disk", "--path", disk, "--virtual-size", str(SIZE), "--expected",
            report["content_sha256"], "--termination-log", str(work / "termination-log")]  # fmt: skip
    commands = {"verifier": ours, "openssl": ["openssl", "dgst", "-sha256", disk]}
    runs: dict[str, list[float]] = {"verifier": [], "openssl": []}
    for index in range(ROUNDS):
        # Alternate who goes first: this VM's disk reads vary by 2x from one read to the next (measured).
        for name in ("verifier", "openssl") if index % 2 == 0 else ("openssl", "verifier"):
            runs[name].append(timed_from_disk(commands[name], disk))
    medians = {name: statistics.median(values) for name, values in runs.items()}
    return {
        "verified_by": status.get("verifiedBy"),
        "cdi_import_s": round(imported - started, 1),
        "verifier_added_s": round(verified - imported, 1),
        "same_volume_runs_s": runs,
        "verifier_mib_s": round(SIZE / (1 << 20) / medians["verifier"], 1),
        "openssl_mib_s": round(SIZE / (1 << 20) / medians["openssl"], 1),
        "ratio_verifier_to_openssl_rate": round(medians["openssl"] / medians["verifier"], 3),
    }


def prepare_node() -> tuple[Path, Any, bool, str]:
    """The real node (reused when healthy, else started), CDI installed, the operator's image pushed:
    (state dir, handle, whether this run started the node, the operator image's reference)."""
    state = Path(os.environ.get("UDS_NODE_STATE_DIR") or ROOT / ".envtest").resolve()
    started_node = not node_launcher.status(state, quiet=True)
    if started_node:
        node_launcher.up(state)
    handle = load_handle(state)
    try:
        subprocess.run(
            [sys.executable, "-m", "tools.cdi.install", "--state-dir", str(state)], cwd=ROOT, check=True
        )
        image = push_operator_image(state, "node-test")
    except BaseException:
        release_node(state, handle, "", started_node)
        raise
    return state, handle, started_node, image


def release_node(state: Path, handle: Any, namespace: str, started_node: bool) -> None:
    """Undo :func:`prepare_node`: the bench's namespace, and the node if this run started it."""
    try:
        if namespace:
            handle.delete_namespace(namespace)
        handle.api.close()
    finally:
        if started_node:
            node_launcher.down(state, stop_plane=True)


def run() -> dict[str, Any]:
    """Import and verify 2 GiB through the real CDI; figures for bench/results/cdi_import_verify.json."""
    state, handle, started_node, image = prepare_node()
    namespace = ""
    try:
        namespace = handle.namespace("bench-cdi")
        with tempfile.TemporaryDirectory(prefix="udsb-", dir="/tmp") as tmp:
            work = Path(tmp)
            operator = OperatorProcess(handle.kubeconfig, namespace, work / "logs", environment={
                **os.environ, "UDS_VM_OPERATOR_IMAGE": image})  # fmt: skip
            operator.start()
            try:
                figures = _measure(handle, namespace, work)
            finally:
                operator.stop()
    finally:
        release_node(state, handle, namespace, started_node)
    return {"size_bytes": SIZE, "rounds": ROUNDS, "results": figures, "summary": figures}
