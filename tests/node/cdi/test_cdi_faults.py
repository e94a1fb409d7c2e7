"""Issue 15 item 7 (part): faults in the middle of a real CDI import.

The image server sends slowly (a pause per MiB) so that the test acts while CDI's importer is still
downloading: it deletes the importer pod, or restarts cdi-controller (deletes its pod; its Deployment makes a
new one). At that moment the operator must say the disk is still being populated and claim nothing; once CDI
has retried on its own the import ends verified by CDI's own checksum, with the right bytes on the disk.
Not covered here: killing cdi-uploadproxy mid-upload.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.node.cdi_support import (
    MIB,
    RESTRICTED,
    ScratchOffer,
    await_import,
    await_verified,
    bridge_image_server,
    datavolume,
    http_udsvm,
    landed_bytes,
    make_image,
    offer_volume,
    running_operator,
    vm_status,
    wait_or_diagnose,
)
from tests.node.node_cluster import NodeHandle

VIRTUAL_SIZE = 48 * MIB
PAUSE_PER_MIB_S = 0.5
NAMESPACE = "cdi-fault"  # cdi_ns (conftest) names each test's namespace after it
LABELS = RESTRICTED
VM = "flaky"
DV = f"{VM}-dv"


def pods(node: NodeHandle, namespace: str, selector: str) -> list[dict[str, Any]]:
    return node.api.items(f"/api/v1/namespaces/{namespace}/pods", selector)


def importer_downloading(
    node: NodeHandle, namespace: str, requests: list[str], scratch: ScratchOffer
) -> dict[str, Any] | None:
    """The importer pod, once it runs and has fetched from our server while the DataVolume imports (CDI may
    ask for scratch space first: offered as it appears)."""
    scratch()
    phase = ((datavolume(node, namespace, DV) or {}).get("status") or {}).get("phase")
    running = [
        p for p in pods(node, namespace, "cdi.kubevirt.io=importer") if p["status"].get("phase") == "Running"
    ]
    if phase == "ImportInProgress" and running and any(line.startswith("GET ") for line in requests):
        return running[0]
    return None


# A restarted cdi-controller may ask for a new scratch claim (`<dv>-scratch`) mid-import: await_import offers
# each new one a volume, as a provisioner would.
@pytest.mark.parametrize("fault", ["importer-pod", "cdi-controller"])
def test_a_fault_mid_import_claims_nothing_and_a_retry_ends_verified(
    cdi: NodeHandle, cdi_ns: str, tmp_path: Path, fault: str
) -> None:
    image = make_image(tmp_path / "srv", "raw", VIRTUAL_SIZE)
    digest = "sha256:" + image.served_sha256
    with (
        running_operator(cdi, cdi_ns, tmp_path / "logs"),
        bridge_image_server(tmp_path / "srv", PAUSE_PER_MIB_S) as (base, requests),
    ):
        cdi.api.apply(
            http_udsvm(cdi_ns, VM, f"{base}/{image.path.name}", digest, VIRTUAL_SIZE),
            f"/apis/uds.dev/v1alpha1/namespaces/{cdi_ns}/udsvirtualmachines/{VM}",
        )
        target = offer_volume(cdi, cdi_ns, DV)
        scratch = ScratchOffer(cdi, cdi_ns, DV)
        importer = wait_or_diagnose(
            cdi,
            cdi_ns,
            "the importer mid-download",
            lambda: importer_downloading(cdi, cdi_ns, requests, scratch),
            240,
        )
        if fault == "importer-pod":
            cdi.api.delete(f"/api/v1/namespaces/{cdi_ns}/pods/{importer['metadata']['name']}")
        else:
            for pod in pods(cdi, "cdi", "cdi.kubevirt.io=cdi-deployment"):
                cdi.api.delete(f"/api/v1/namespaces/cdi/pods/{pod['metadata']['name']}")

        def reported_in_flight() -> dict[str, Any] | None:
            status = vm_status(cdi, cdi_ns, VM)
            return status if status.get("phase") in ("Importing", "Pending") else None

        during = wait_or_diagnose(cdi, cdi_ns, "the operator's status mid-import", reported_in_flight, 60)
        assert during["checksumVerified"] is False and not during.get("verifiedBy"), during
        _, dv = await_import(cdi, cdi_ns, DV, timeout_s=600, target=target, scratch=scratch)
        assert dv["status"]["phase"] == "Succeeded", dv["status"]
        status = await_verified(cdi, cdi_ns, VM, "checksumVerified after the retry", 120)
    assert status["verifiedBy"] == "cdi-http-checksum" and status["verifiedDigest"] == digest
    assert landed_bytes(target, VIRTUAL_SIZE) == image.raw, "the retried import left the whole disk"
    if fault == "cdi-controller":
        wait_or_diagnose(
            cdi,
            "cdi",
            "a new cdi-controller pod",
            lambda: any(
                p["status"].get("phase") == "Running"
                for p in pods(cdi, "cdi", "cdi.kubevirt.io=cdi-deployment")
            ),
            180,
        )
