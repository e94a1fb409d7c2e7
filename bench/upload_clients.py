"""The real data path's upload: `uds-vmctl upload` against `virtctl image-upload` and a plain HTTP client.

Issue 35 item 4. One 2 GiB raw image of random bytes (nothing sparse to skip) goes three times through the
same real cdi-uploadproxy on the real node, each time into a DataVolume of the same spec (the one the operator
makes for a UDSVirtualMachine with an upload source) on a static local ext4 PV of exactly its size:

- `ours`: `uds-vmctl upload` as a field engineer runs it: it first checks the image's digest against the
  VM's declaration (so a wrong image sends nothing), then streams it; TLS checked against CDI's CA;
- `virtctl`: KubeVirt v1.8.4's own `virtctl image-upload dv NAME --no-create`
  (tools/kubevirt/build-virtctl.sh), with `--insecure`, as virtctl has no CA option; no digest check;
- `http`: curl, as a script would do it: an UploadTokenRequest, then one streamed POST of the file to
  `/v1beta1/upload` with the token, TLS checked against CDI's CA; no digest check.

Each client's clock starts when it is started, with the image's pages evicted from the page cache first (every
client reads the device), and stops when CDI reports the DataVolume `Succeeded`. Two rounds, the second in the
reverse order (ours, virtctl, http, then http, virtctl, ours), so no client always goes first; each upload has
its own DataVolume, and all six are made and `UploadReady` before the first clock starts, so no upload
server's start is in any clock. The result: each client's seconds per round, its mean and MiB/s, `ours`'
digest check timed alone on the same file (SPEC §CLI: the digest is checked before the first byte is sent),
and the goal's ratio: the faster of the other two over ours, from the means (goal ≥ 0.95).

Needs root and the real node: it reuses the healthy node of UDS_NODE_STATE_DIR (or .envtest), else starts one
there and stops it at the end. CDI is installed with tools/cdi/install.py (idempotent). Run with
`python -m bench.run upload_clients` (about 4 min on a warm node).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.cdi_import_verify import ROOT, SIZE, prepare_node, release_node
from bench.page_cache import evict_one
from tests.integration.operator_harness import OperatorProcess
from tests.node.cdi_support import datavolume, dv_phase, offer_volume
from tests.node.node_cluster import NodeHandle, wait_until

CLIENTS = ("ours", "virtctl", "http")
ROUNDS = (CLIENTS, tuple(reversed(CLIENTS)))
PROXY_NAME = "cdi-uploadproxy.cdi.svc"
CDI_API = "/apis/cdi.kubevirt.io/v1beta1"
UPLOAD_API = "/apis/upload.cdi.kubevirt.io/v1beta1"


def _random_image(path: Path) -> None:
    with open(path, "wb") as out:
        for _ in range(SIZE >> 24):
            out.write(os.urandom(16 << 20))
        out.flush()
        os.fsync(out.fileno())


def _slot(client: str, round_index: int) -> str:
    """The name of one upload's target: for `ours` the UDSVirtualMachine (its DataVolume is `<name>-dv`)."""
    return f"{client}{round_index}"


def _declare_ours(handle: NodeHandle, namespace: str, image: Path, work: Path, vm_name: str) -> None:
    """`uds-vmctl prep`, then the image record and the VM it wrote: the operator makes `<vm_name>-dv`."""
    argv = [sys.executable, "-m", "uds_vm_operator.cli.main", "prep", str(image), "--name", vm_name,
            "-n", namespace, "-o", str(work), "--json"]  # fmt: skip
    subprocess.run(argv, capture_output=True, text=True, check=True)
    record = yaml.safe_load((work / f"{vm_name}.image-record.configmap.yaml").read_text(encoding="utf-8"))
    handle.api.apply(record, f"/api/v1/namespaces/{namespace}/configmaps/{record['metadata']['name']}")
    vm = yaml.safe_load((work / f"{vm_name}.udsvm.yaml").read_text(encoding="utf-8"))
    vm["spec"]["disk"].update({"storageClassName": "udsvm-local", "volumeMode": "Filesystem"})
    handle.api.apply(vm, f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines/{vm_name}")


def _same_datavolume(handle: NodeHandle, namespace: str, template: dict[str, Any], name: str) -> None:
    """A DataVolume with the spec the operator gave `ours-dv`, under another name (no owner, no labels)."""
    manifest = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name, "namespace": namespace},
        "spec": template["spec"],
    }
    handle.create(manifest, f"{CDI_API}/namespaces/{namespace}/datavolumes")


def _upload_ready(handle: NodeHandle, namespace: str, dv: str, volumes: list[Any]) -> None:
    """Give CDI's claims (the disk's, and the upload server's scratch claim if it asks) real volumes."""
    volumes.append(offer_volume(handle, namespace, dv))
    scratch: list[Any] = []

    def ready() -> bool:
        claim = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{dv}-scratch"
        if not scratch and handle.api.get(claim):
            scratch.append(offer_volume(handle, namespace, f"{dv}-scratch"))
        return dv_phase(handle, namespace, dv) == "UploadReady"

    wait_until(f"{dv} UploadReady", ready, 600, 0.5)
    volumes.extend(scratch)


def _token(handle: NodeHandle, namespace: str, dv: str) -> str:
    request = {
        "apiVersion": "upload.cdi.kubevirt.io/v1beta1",
        "kind": "UploadTokenRequest",
        "metadata": {"name": f"{dv}-token", "namespace": namespace},
        "spec": {"pvcName": dv},
    }
    _, answer = handle.api.call(
        "POST", f"{UPLOAD_API}/namespaces/{namespace}/uploadtokenrequests", request, expect=(200, 201)
    )
    return str(answer["status"]["token"])


@dataclass(frozen=True)
class Proxy:
    """Where the three clients send the image: CDI's upload proxy, and what they need to reach it."""

    handle: NodeHandle
    namespace: str
    address: str
    ca: Path
    virtctl: str


def _client_argv(client: str, proxy: Proxy, image: Path, slot: str) -> list[str]:
    url = f"https://{proxy.address}:443"
    if client == "ours":
        return [sys.executable, "-m", "uds_vm_operator.cli.main", "upload", str(image), "--name", slot,
                "-n", proxy.namespace, "--kubeconfig", str(proxy.handle.kubeconfig), "--uploadproxy-url", url,
                "--ca-file", str(proxy.ca), "--tls-server-name", PROXY_NAME, "--json"]  # fmt: skip
    if client == "virtctl":
        return [proxy.virtctl, "image-upload", "dv", f"{slot}-dv", "--no-create", "--image-path", str(image),
                "--uploadproxy-url", url, "--insecure", "-n", proxy.namespace,
                "--kubeconfig", str(proxy.handle.kubeconfig)]  # fmt: skip
    token = _token(proxy.handle, proxy.namespace, f"{slot}-dv")
    return ["curl", "--silent", "--show-error", "--fail", "--cacert", str(proxy.ca),
            "--resolve", f"{PROXY_NAME}:443:{proxy.address}", "-X", "POST", "-T", str(image), "-H", "Expect:",
            "-H", f"Authorization: Bearer {token}", "-H", "Content-Type: application/octet-stream",
            f"https://{PROXY_NAME}:443/v1beta1/upload"]  # fmt: skip


def _time_client(client: str, proxy: Proxy, image: Path, slot: str) -> tuple[float, dict[str, Any]]:
    """Seconds from starting `client` (the image's pages evicted) until its DataVolume is Succeeded, and for
    `ours` its own `--json` report (the digest check's and the stream's seconds)."""
    dv = f"{slot}-dv"
    evict_one(image)
    started = time.monotonic()
    argv = _client_argv(
        client, proxy, image, slot
    )  # curl's token request is inside the clock, as in the others
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{client} failed ({done.returncode}): {done.stderr[-2000:]}")
    wait_until(
        f"{dv} Succeeded", lambda: dv_phase(proxy.handle, proxy.namespace, dv) == "Succeeded", 1800, 0.2
    )
    seconds = time.monotonic() - started
    return seconds, json.loads(done.stdout) if client == "ours" else {}


def _digest_check_s(image: Path) -> float:
    """What `ours`' local digest check costs alone: sha256 of the file, read from the device."""
    evict_one(image)
    started = time.monotonic()
    digest = hashlib.sha256()
    with open(image, "rb") as handle:
        while chunk := handle.read(4 << 20):
            digest.update(chunk)
    return time.monotonic() - started


def _measure(handle: NodeHandle, namespace: str, work: Path, virtctl: str) -> dict[str, Any]:
    image = work / "bench.raw"
    _random_image(image)
    volumes: list[Any] = []
    first = _slot("ours", 0)
    for index in range(len(ROUNDS)):
        _declare_ours(handle, namespace, image, work, _slot("ours", index))
        _upload_ready(handle, namespace, f"{_slot('ours', index)}-dv", volumes)
    template = datavolume(handle, namespace, f"{first}-dv") or {}
    for index in range(len(ROUNDS)):
        for client in CLIENTS[1:]:
            _same_datavolume(handle, namespace, template, f"{_slot(client, index)}-dv")
            _upload_ready(handle, namespace, f"{_slot(client, index)}-dv", volumes)
    service = handle.api.get("/api/v1/namespaces/cdi/services/cdi-uploadproxy") or {}
    bundle = handle.api.get("/api/v1/namespaces/cdi/configmaps/cdi-uploadproxy-signer-bundle") or {}
    ca = work / "ca.pem"
    ca.write_text(bundle["data"]["ca-bundle.crt"], encoding="utf-8")
    proxy = Proxy(handle, namespace, str(service["spec"]["clusterIP"]), ca, virtctl)
    runs: dict[str, list[float]] = {client: [] for client in CLIENTS}
    reports: list[dict[str, Any]] = []
    for index, order in enumerate(ROUNDS):
        for client in order:
            seconds, report = _time_client(client, proxy, image, _slot(client, index))
            runs[client].append(seconds)
            reports += [report] if report else []
            print(f"  round {index + 1}: {client} {runs[client][-1]:.2f} s", file=sys.stderr)
    digest_s = _digest_check_s(image)
    mib = SIZE / (1 << 20)
    means = {client: sum(values) / len(values) for client, values in runs.items()}
    fastest_other = min(means["virtctl"], means["http"])
    in_cli_digest_s = sum(r["digestCheckSeconds"] for r in reports) / len(reports)
    return {
        "rounds": [list(order) for order in ROUNDS],
        "seconds": {client: [round(value, 2) for value in values] for client, values in runs.items()},
        "mean_s": {client: round(value, 2) for client, value in means.items()},
        "mib_s": {client: round(mib / value, 1) for client, value in means.items()},
        "ours_reports": reports,
        "ours_digest_check_alone_s": round(digest_s, 2),
        "ours_digest_check_in_cli_s": round(in_cli_digest_s, 2),
        "ours_without_digest_check_s": round(means["ours"] - in_cli_digest_s, 2),
        "ratio_ours_to_faster_other": round(fastest_other / means["ours"], 3),
        "ratio_ours_without_digest_check_to_faster_other": round(
            fastest_other / (means["ours"] - in_cli_digest_s), 3
        ),
        "goal": ">= 0.95",
    }


def run() -> dict[str, Any]:
    """Upload 2 GiB three ways through the real CDI; figures for bench/results/upload_clients.json."""
    virtctl = subprocess.run(
        [str(ROOT / "tools/kubevirt/build-virtctl.sh")], capture_output=True, text=True, check=True
    ).stdout.strip()
    state, handle, started_node, operator_image = prepare_node()
    namespace = ""
    try:
        namespace = handle.namespace("bench-upload")
        with tempfile.TemporaryDirectory(prefix="udsb-", dir="/tmp") as tmp:
            work = Path(tmp)
            operator = OperatorProcess(handle.kubeconfig, namespace, work / "logs", environment={
                **os.environ, "UDS_VM_OPERATOR_IMAGE": operator_image})  # fmt: skip
            operator.start()
            try:
                figures = _measure(handle, namespace, work, virtctl)
            finally:
                operator.stop()
    finally:
        release_node(state, handle, namespace, started_node)
    print(json.dumps(figures, indent=2), file=sys.stderr)
    return {"size_bytes": SIZE, "results": figures, "summary": figures}
