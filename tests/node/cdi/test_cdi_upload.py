"""Issue 15 item 4: upload for real. `uds-vmctl prep` seals the image's digests, `uds-vmctl upload` checks the
file against them and streams it to the real cdi-uploadproxy (token from the real CDI API, TLS checked
against CDI's own CA), CDI's upload server converts the qcow2 to raw, and the operator's verifier pod hashes
what really landed against the raw-content digest prep recorded.

An image altered after prep is refused by the CLI before a byte is sent; the same altered bytes forced through
the proxy the way `virtctl image-upload` would (no local check) are caught by the verifier: ChecksumMismatch,
the VM stays off.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.operator_harness import OperatorProcess
from tests.node.cdi.upload_support import (
    DV,
    PROXY_NAME,
    VM,
    prep_and_apply,
    succeeded,
    upload_ready,
    vmctl_upload,
)
from tests.node.cdi_support import (
    MIB,
    RESTRICTED,
    await_verified,
    datavolume,
    make_image,
    running_operator,
    vm_status,
    wait_or_diagnose,
)
from tests.node.node_cluster import NodeHandle
from uds_vm_operator.cli._kube import KubeClient
from uds_vm_operator.cli.upload import request_upload_token
from uds_vm_operator.cli.upload_proxy import ProxyTarget, stream_upload

VIRTUAL_SIZE = 16 * MIB
NAMESPACE = "cdi-up"  # cdi_ns (conftest) names each test's namespace after it
LABELS = RESTRICTED


@pytest.fixture
def operator(cdi: NodeHandle, operator_image: str, cdi_ns: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The operator as a host process; its verifier pods run the operator's image on the node."""
    with running_operator(cdi, cdi_ns, tmp_path / "logs", operator_image) as process:
        yield process


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
    status = await_verified(cdi, cdi_ns, VM, "the verifier's verdict", 240)
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
    cluster = KubeClient(cdi.kubeconfig)
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
