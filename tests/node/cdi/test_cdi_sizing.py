"""Issue 15 item 5: sizing proven on real filesystems, with the real CDI on the real node.

For sparse images of several virtual sizes the operator asks for exactly `sizing.pvc_size` (SPEC §4 plus the
filesystem reserve, ADR 0013), CDI passes that request to the claim unchanged (`spec.pvc`: no second
inflation), and CDI's importer fills a PV of exactly that size on ext4 and on xfs. The same import into a
PV of the virtual size (1:1, what users first try) fails with CDI's own error.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.node.cdi_support import (
    CDI_API,
    MIB,
    await_import,
    bridge_image_server,
    claim_request,
    diagnose,
    dv_condition,
    http_udsvm,
    make_image,
    offer_volume,
    running_operator,
    vm_status,
    wait_or_diagnose,
)
from tests.node.node_cluster import NodeHandle
from uds_vm_operator.sizing import pvc_mib, pvc_size

SIZES = [1 * MIB, 1024 * MIB, 3300 * MIB]
"""The mkfs.xfs floor decides (1 MiB), the fixed reserve (1 GiB), the 6 % term (3300 MiB)."""
LARGER_PVC_REQUIRED = "A larger PVC is required"  # CDI's ErrLargerPVCRequired, in the claim's event
NAMESPACE = "cdi-size"  # cdi_ns (conftest) names each test's namespace after it
TOO_SMALL = "DataVolume too small to contain image"  # what CDI's controller puts on the DataVolume for it


def pvc_of(node: NodeHandle, namespace: str, name: str) -> dict[str, Any]:
    pvc = node.api.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")
    assert pvc is not None, f"claim {name} is gone"
    return dict(pvc)


@pytest.mark.parametrize("filesystem", ["ext4", "xfs"])
@pytest.mark.parametrize("virtual_size", SIZES, ids=[f"{s // MIB}MiB" for s in SIZES])
def test_the_operators_pvc_holds_cdis_import_in_a_pv_of_exactly_its_size(
    cdi: NodeHandle, cdi_ns: str, tmp_path: Path, filesystem: str, virtual_size: int
) -> None:
    image = make_image(tmp_path / "srv", "qcow2", virtual_size)
    digest = "sha256:" + image.served_sha256
    with (
        running_operator(cdi, cdi_ns, tmp_path / "logs"),
        bridge_image_server(tmp_path / "srv") as (base, _),
    ):
        cdi.api.apply(
            http_udsvm(cdi_ns, "sized", f"{base}/{image.path.name}", digest, virtual_size),
            f"/apis/uds.dev/v1alpha1/namespaces/{cdi_ns}/udsvirtualmachines/sized",
        )
        target, dv = await_import(cdi, cdi_ns, "sized-dv", filesystem, timeout_s=600)
        status = vm_status(cdi, cdi_ns, "sized")
    expected = pvc_size(virtual_size)
    assert dv["status"]["phase"] == "Succeeded", diagnose(cdi, cdi_ns)
    assert dv["spec"]["pvc"]["resources"]["requests"]["storage"] == expected
    assert claim_request(pvc_of(cdi, cdi_ns, "sized-dv")) == pvc_mib(virtual_size) * MIB, (
        "CDI passed the operator's request to the claim unchanged"
    )
    assert target.size_bytes == pvc_mib(virtual_size) * MIB, "the PV is exactly the claim's size"
    assert status.get("pvcSize") == expected
    assert target.mount_point is not None
    with open(target.mount_point / "disk.img", "rb") as handle:
        landed = hashlib.sha256(handle.read(virtual_size)).hexdigest()
    assert landed == image.raw_sha256, "the whole virtual disk landed"


def one_to_one_datavolume(namespace: str, url: str, digest: str, size: int) -> dict[str, Any]:
    """What users first write: a DataVolume whose claim is exactly the virtual size (spec.pvc: verbatim)."""
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {
            "name": "naive",
            "namespace": namespace,
            "annotations": {"cdi.kubevirt.io/storage.bind.immediate.requested": "true"},
        },
        "spec": {
            "source": {"http": {"url": url, "checksum": digest}},
            "pvc": {
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Filesystem",
                "storageClassName": "udsvm-local",
                "resources": {"requests": {"storage": str(size)}},
            },
        },
    }


@pytest.mark.parametrize("filesystem", ["ext4", "xfs"])
def test_a_one_to_one_pv_fails_with_cdis_own_error(
    cdi: NodeHandle, cdi_ns: str, tmp_path: Path, filesystem: str
) -> None:
    virtual_size = 320 * MIB  # mkfs.xfs formats nothing under 300 MiB
    image = make_image(tmp_path / "srv", "qcow2", virtual_size)
    with bridge_image_server(tmp_path / "srv") as (base, _):
        url = f"{base}/{image.path.name}"
        cdi.create(
            one_to_one_datavolume(cdi_ns, url, "sha256:" + image.served_sha256, virtual_size),
            f"{CDI_API}/namespaces/{cdi_ns}/datavolumes",
        )
        volume = offer_volume(cdi, cdi_ns, "naive", filesystem)
        assert volume.size_bytes == virtual_size

        scratch: list[Any] = []

        def refused() -> dict[str, Any] | None:
            # CDI's importer first asks for scratch space on a claim this tight (seen on the node).
            if not scratch and cdi.api.get(
                f"/api/v1/namespaces/{cdi_ns}/persistentvolumeclaims/naive-scratch"
            ):
                scratch.append(offer_volume(cdi, cdi_ns, "naive-scratch", filesystem))
            dv = cdi.api.get(f"{CDI_API}/namespaces/{cdi_ns}/datavolumes/naive") or {}
            running = dv_condition(dv, "Running")
            return running if running.get("message") == TOO_SMALL else None

        running = wait_or_diagnose(cdi, cdi_ns, "CDI to refuse the 1:1 claim", refused, 240)
    assert running["status"] == "False", running

    def reported_by_the_importer() -> list[str]:
        events = cdi.api.items(f"/api/v1/namespaces/{cdi_ns}/events")
        return [e["message"] for e in events if LARGER_PVC_REQUIRED in (e.get("message") or "")]

    reported = wait_or_diagnose(cdi, cdi_ns, "the importer's own error", reported_by_the_importer, 60)
    assert reported and "is larger than the reported available storage" in reported[0], reported
    dv = cdi.api.get(f"{CDI_API}/namespaces/{cdi_ns}/datavolumes/naive") or {}
    assert dv["status"]["phase"] != "Succeeded", "CDI never claims the 1:1 import done"
