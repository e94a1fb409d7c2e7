"""Issue 15 item 3: HTTP import for real. The operator renders the DataVolume, CDI's webhooks admit it, CDI's
importer pod downloads the image from a server on the node's bridge, checks `spec.source.http.checksum`
itself and converts the image; the operator reports `verifiedBy: cdi-http-checksum` only after that.

Formats: raw, qcow2, qcow2 with compressed clusters, raw.gz and raw.xz, each made in the test with qemu-img
or Python's compressors. A tampered file (the digest of the original declared) must fail CDI's own check,
and the operator must say so and keep the VM off.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_harness import OperatorProcess
from tests.node.cdi_support import (
    MIB,
    RESTRICTED,
    await_import,
    bridge_image_server,
    dv_condition,
    http_udsvm,
    landed_bytes,
    make_image,
    running_operator,
    vm_status,
)
from tests.node.node_cluster import NodeHandle, wait_until

VIRTUAL_SIZE = 16 * MIB
NAMESPACE = "cdi-http"  # cdi_ns (conftest) names each test's namespace after it
LABELS = RESTRICTED
VM = "web"
DV = f"{VM}-dv"


@pytest.fixture
def operator(cdi: NodeHandle, cdi_ns: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    with running_operator(cdi, cdi_ns, tmp_path / "logs") as process:
        yield process


def status_of(node: NodeHandle, namespace: str) -> dict[str, Any]:
    return vm_status(node, namespace, VM)


def import_through_cdi(node: NodeHandle, namespace: str, url: str, digest: str) -> tuple[Any, dict[str, Any]]:
    """Declare the VM, give CDI's claims real volumes, and wait until CDI ends the import either way."""
    node.api.apply(
        http_udsvm(namespace, VM, url, digest, VIRTUAL_SIZE),
        f"/apis/uds.dev/v1alpha1/namespaces/{namespace}/udsvirtualmachines/{VM}",
    )
    return await_import(node, namespace, DV)


@pytest.mark.parametrize("fmt", ["raw", "qcow2", "qcow2c", "raw.gz", "raw.xz"])
def test_cdi_imports_the_image_checks_its_digest_and_the_operator_reports_it(
    cdi: NodeHandle, operator: OperatorProcess, cdi_ns: str, tmp_path: Path, fmt: str
) -> None:
    image = make_image(tmp_path / "srv", fmt, VIRTUAL_SIZE)
    digest = "sha256:" + image.served_sha256
    with bridge_image_server(tmp_path / "srv") as (base, requests):
        target, dv = import_through_cdi(cdi, cdi_ns, f"{base}/{image.path.name}", digest)
    assert dv["spec"]["source"]["http"]["checksum"] == digest, "the operator handed the digest to CDI"
    assert dv["status"]["phase"] == "Succeeded", dv["status"]
    assert any(f"GET /{image.path.name}" in line for line in requests), (
        "CDI's importer fetched from our server"
    )
    assert landed_bytes(target, VIRTUAL_SIZE) == image.raw, "the raw disk CDI wrote is the image's content"
    status = wait_until(
        "checksumVerified", lambda: (s := status_of(cdi, cdi_ns)).get("checksumVerified") and s, 90
    )
    assert status["verifiedBy"] == "cdi-http-checksum" and status["verifiedDigest"] == digest


def test_a_tampered_image_fails_cdis_own_check_and_the_vm_stays_off(
    cdi: NodeHandle, operator: OperatorProcess, cdi_ns: str, tmp_path: Path
) -> None:
    image = make_image(tmp_path / "srv", "qcow2", VIRTUAL_SIZE)
    declared = "sha256:" + image.served_sha256
    data = bytearray(image.path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit, after the digest was published
    image.path.write_bytes(bytes(data))
    assert hashlib.sha256(data).hexdigest() != image.served_sha256
    with bridge_image_server(tmp_path / "srv") as (base, _):
        target, dv = import_through_cdi(cdi, cdi_ns, f"{base}/{image.path.name}", declared)
    assert dv["status"]["phase"] == "Failed", dv["status"]
    running = dv_condition(dv, "Running")
    assert "checksum mismatch" in running.get("message", ""), running
    status = wait_until("Failed", lambda: (s := status_of(cdi, cdi_ns)).get("phase") == "Failed" and s, 90)
    assert status["checksumVerified"] is False and not status.get("verifiedBy")
    assert "checksum" in status.get("message", "").lower(), status
    vm = cdi.api.get(f"/apis/kubevirt.io/v1/namespaces/{cdi_ns}/virtualmachines/{VM}") or {}
    assert vm.get("spec", {}).get("runStrategy") == "Halted", "the VM never started"
    assert target.mount_point is not None and not (target.mount_point / "disk.img").exists(), (
        "CDI removed the bad download"
    )
