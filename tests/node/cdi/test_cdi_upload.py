"""Issue 15 item 4: upload for real. `uds-vmctl prep` seals the image's digests, `uds-vmctl upload` checks the
file against them and streams it to the real cdi-uploadproxy (token from the real CDI API, TLS checked
against CDI's own CA), CDI's upload server converts the qcow2 to raw, and the operator's verifier pod hashes
what really landed against the raw-content digest prep recorded.

An image altered after prep is refused by the CLI before a byte is sent; the same altered bytes forced through
the proxy the way `virtctl image-upload` would (no local check) are caught by the verifier: ChecksumMismatch,
the VM stays off.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cdi_support import (
    MIB,
    RESTRICTED,
    datavolume,
    make_image,
    offer_volume,
    running_operator,
    vm_status,
    wait_or_diagnose,
)
from node_cluster import NodeHandle

from integration.operator_harness import OperatorProcess
from uds_vm_operator.cli.upload import ClusterClient, request_upload_token
from uds_vm_operator.cli.upload_proxy import ProxyTarget, stream_upload

VIRTUAL_SIZE = 16 * MIB
NAMESPACE = "cdi-up"  # cdi_ns (conftest) names each test's namespace after it
LABELS = RESTRICTED
VM = "up"
DV = f"{VM}-dv"
PROXY_NAME = "cdi-uploadproxy.cdi.svc"  # a name in the proxy's certificate (CDI's cert manager)


@pytest.fixture
def operator(cdi: NodeHandle, operator_image: str, cdi_ns: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The operator as a host process; its verifier pods run the operator's image on the node."""
    with running_operator(cdi, cdi_ns, tmp_path / "logs", operator_image) as process:
        yield process


def vmctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "uds_vm_operator.cli.main", *args], capture_output=True, text=True, check=False
    )


def vmctl_upload(
    node: NodeHandle, namespace: str, image: Path, url: str, ca: Path
) -> subprocess.CompletedProcess[str]:
    """`uds-vmctl upload` to the real proxy, its TLS checked against CDI's own CA under the proxy's name."""
    return vmctl(
        "upload", str(image), "--name", VM, "-n", namespace, "--kubeconfig", str(node.kubeconfig),
        "--uploadproxy-url", url, "--ca-file", str(ca), "--tls-server-name", PROXY_NAME,
    )  # fmt: skip


def proxy(node: NodeHandle, folder: Path) -> tuple[str, Path]:
    """The upload proxy's Service address (kube-proxy routes it from the host) and CDI's CA bundle for it."""
    service = node.api.get("/api/v1/namespaces/cdi/services/cdi-uploadproxy")
    bundle = node.api.get("/api/v1/namespaces/cdi/configmaps/cdi-uploadproxy-signer-bundle")
    assert service is not None and bundle is not None, "CDI's upload proxy is not installed"
    ca = folder / "uploadproxy-ca.pem"
    ca.write_text(bundle["data"]["ca-bundle.crt"], encoding="utf-8")
    return f"https://{service['spec']['clusterIP']}:443", ca


def prep_and_apply(node: NodeHandle, namespace: str, image: Path, out: Path) -> dict[str, Any]:
    """`uds-vmctl prep` the image, then apply what it wrote (on the node's local class)."""
    done = vmctl("prep", str(image), "--name", VM, "-n", namespace, "-o", str(out), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    record = yaml.safe_load((out / f"{VM}.image-record.configmap.yaml").read_text(encoding="utf-8"))
    node.api.apply(record, f"/api/v1/namespaces/{namespace}/configmaps/{record['metadata']['name']}")
    vm = yaml.safe_load((out / f"{VM}.udsvm.yaml").read_text(encoding="utf-8"))
    vm["spec"]["disk"].update({"storageClassName": "udsvm-local", "volumeMode": "Filesystem"})
    node.api.apply(vm, f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines/{VM}")
    return dict(report)


def upload_ready(node: NodeHandle, namespace: str, folder: Path) -> tuple[str, Path]:
    """Offer CDI's claims (target and scratch) real volumes, wait until the upload server listens, and
    return the proxy's URL and CA (see `proxy`)."""
    offer_volume(node, namespace, DV)
    scratch = [False]

    def ready() -> bool:
        if not scratch[0] and node.api.get(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{DV}-scratch"
        ):
            offer_volume(node, namespace, f"{DV}-scratch")
            scratch[0] = True
        return ((datavolume(node, namespace, DV) or {}).get("status") or {}).get("phase") == "UploadReady"

    wait_or_diagnose(node, namespace, f"{DV} UploadReady", ready, 240)
    return proxy(node, folder)


def succeeded(node: NodeHandle, namespace: str) -> None:
    def done() -> bool:
        return ((datavolume(node, namespace, DV) or {}).get("status") or {}).get("phase") == "Succeeded"

    wait_or_diagnose(node, namespace, f"{DV} Succeeded", done, 240)


def test_an_upload_through_the_real_proxy_is_verified_by_the_operator(
    cdi: NodeHandle, operator: OperatorProcess, cdi_ns: str, tmp_path: Path
) -> None:
    image = make_image(tmp_path / "img", "qcow2", VIRTUAL_SIZE)
    report = prep_and_apply(cdi, cdi_ns, image.path, tmp_path / "out")
    assert report["content_sha256"] == "sha256:" + image.raw_sha256
    url, ca = upload_ready(cdi, cdi_ns, tmp_path)
    done = vmctl_upload(cdi, cdi_ns, image.path, url, ca)
    assert done.returncode == 0, done.stderr
    assert "local digest matches" in done.stderr
    succeeded(cdi, cdi_ns)

    def verified() -> dict[str, Any] | None:
        status = vm_status(cdi, cdi_ns, VM)
        return status if status.get("checksumVerified") else None

    status = wait_or_diagnose(cdi, cdi_ns, "the verifier's verdict", verified, 240)
    assert status["verifiedBy"] == "in-cluster-verifier"
    assert status["verifiedDigest"] == report["sha256"]


def test_an_altered_image_is_refused_by_the_cli_and_caught_by_the_verifier_when_forced(
    cdi: NodeHandle, operator: OperatorProcess, cdi_ns: str, tmp_path: Path
) -> None:
    image = make_image(tmp_path / "img", "qcow2", VIRTUAL_SIZE)
    prep_and_apply(cdi, cdi_ns, image.path, tmp_path / "out")
    altered = make_image(tmp_path / "other", "qcow2", VIRTUAL_SIZE, seed=2)
    image.path.write_bytes(altered.path.read_bytes())  # replaced after prep sealed its digests
    url, ca = upload_ready(cdi, cdi_ns, tmp_path)
    refused = vmctl_upload(cdi, cdi_ns, image.path, url, ca)
    assert refused.returncode == 1, refused.stderr
    assert "nothing was sent" in refused.stderr
    dv = datavolume(cdi, cdi_ns, DV) or {}
    assert dv["status"]["phase"] == "UploadReady", "the CLI sent nothing"

    # virtctl-style: a token from the real CDI API and the raw bytes, with no local digest check.
    cluster = ClusterClient.connect(cdi.kubeconfig)
    try:
        token = request_upload_token(cluster, cdi_ns, DV)
    finally:
        cluster.close()
    stream_upload(ProxyTarget(url, str(ca), server_name=PROXY_NAME), token, image.path)
    succeeded(cdi, cdi_ns)

    def failed() -> dict[str, Any] | None:
        status = vm_status(cdi, cdi_ns, VM)
        return status if status.get("phase") == "Failed" else None

    status = wait_or_diagnose(cdi, cdi_ns, "the verifier's mismatch", failed, 240)
    assert status["checksumVerified"] is False and not status.get("verifiedBy")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ChecksumMismatch", ready
    assert "sha256:" + altered.raw_sha256 in ready["message"], "the digest of what really landed"
    vm = cdi.api.get(f"/apis/kubevirt.io/v1/namespaces/{cdi_ns}/virtualmachines/{VM}") or {}
    assert vm.get("spec", {}).get("runStrategy") == "Halted", "the VM never started"
