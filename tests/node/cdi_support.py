"""Helpers of the real-CDI tests: disk images made in the test, an HTTP server the importer pods can reach,
and real volumes handed to the claims CDI creates.

Nothing here plays CDI. CDI's controller creates the claims (the target, and the scratch claim its HTTP
importer needs), the importer pod downloads, checks the checksum and converts; the tests only offer each
claim a static local PV of exactly the size that claim asks for, as a provisioner would.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from tests.cdi_images.disk_images import MIB, DiskImage, image_server, make_image
from tests.node.node_cluster import NodeHandle, running_operator, wait_until
from uds_vm_operator.cli.main import app

__all__ = ["MIB", "DiskImage", "bridge_image_server", "make_image", "running_operator"]

ROOT = Path(__file__).resolve().parents[2]
NODE_ADDRESS = "10.244.0.1"  # the node's bridge address: importer pods reach it, not the host's loopback
CDI_API = "/apis/cdi.kubevirt.io/v1beta1"


def ensure_cdi(node: NodeHandle) -> None:
    """`make cdi-up` for this node (idempotent): CDI's images pushed, cdi-operator and a CDI resource."""
    subprocess.run(
        [sys.executable, "-m", "tools.cdi.install", "--state-dir", str(node.state_dir)], cwd=ROOT, check=True
    )


@contextmanager
def bridge_image_server(folder: Path, pause_per_mib_s: float = 0.0) -> Iterator[tuple[str, list[str]]]:
    """The image server on the node's bridge address, where CDI's importer pods can reach it."""
    with image_server(folder, NODE_ADDRESS, pause_per_mib_s) as served:
        yield served


# ------------------------------------------------------------------------------------- golden-image RBAC


def _rbac_object_path(manifest: dict[str, Any]) -> str:
    """Where to apply one manifest of `uds-vmctl golden-image rbac` (no --quota: Namespace, Role, binding)."""
    meta = manifest["metadata"]
    if manifest["kind"] == "Namespace":
        return f"/api/v1/namespaces/{meta['name']}"
    plural = {"Role": "roles", "RoleBinding": "rolebindings"}[manifest["kind"]]
    return f"/apis/rbac.authorization.k8s.io/v1/namespaces/{meta['namespace']}/{plural}/{meta['name']}"


def apply_golden_image_rbac(node: NodeHandle, image_ns: str, consumer: str) -> None:
    """Apply what `uds-vmctl golden-image rbac` prints for this pair of namespaces: the consumer may clone
    from the golden namespace, nothing more.

    No --quota: on this node the golden class is the only class, and the quota would keep the consumer off it.
    """
    result = CliRunner().invoke(
        app, ["golden-image", "rbac", "--image-namespace", image_ns, "--consumer-namespace", consumer]
    )
    assert result.exit_code == 0, result.output
    for manifest in yaml.safe_load_all(result.stdout):
        node.api.apply(manifest, _rbac_object_path(manifest))


# ------------------------------------------------------------------------------------------------ volumes


def claim_request(pvc: dict[str, Any]) -> int:
    """The byte count a claim asks for (CDI writes plain integers or binary suffixes)."""
    text = str(pvc["spec"]["resources"]["requests"]["storage"])
    units = {"Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB, "Ti": 1024 * 1024 * MIB}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def offer_volume(
    node: NodeHandle, namespace: str, claim: str, filesystem: str = "ext4", timeout_s: float = 120.0
) -> Any:
    """Wait for CDI's claim `claim`, then give it a real volume of exactly the size it requests."""
    pvc = wait_until(
        f"PVC {namespace}/{claim}",
        lambda: node.api.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}"),
        timeout_s,
    )
    mode = pvc["spec"].get("volumeMode") or "Filesystem"
    return node.volume(claim_request(pvc), mode, filesystem, claim=(namespace, claim))  # type: ignore[arg-type]


def landed_bytes(volume: Any, length: int) -> bytes:
    """The first `length` bytes of the disk CDI wrote (disk.img on Filesystem, the device on Block)."""
    source = Path(volume.mount_point) / "disk.img" if volume.mount_point else Path(volume.device)
    with open(source, "rb") as handle:
        return handle.read(length)


def datavolume(node: NodeHandle, namespace: str, name: str) -> dict[str, Any] | None:
    return node.api.get(f"{CDI_API}/namespaces/{namespace}/datavolumes/{name}")


def dv_phase(node: NodeHandle, namespace: str, name: str) -> str:
    """The DataVolume's status.phase, "" while it has none or does not exist (for waits that poll it)."""
    return str(((datavolume(node, namespace, name) or {}).get("status") or {}).get("phase") or "")


def dv_condition(dv: dict[str, Any], kind: str) -> dict[str, Any]:
    for condition in (dv.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(MIB), b""):
            digest.update(chunk)
    return digest.hexdigest()


def disk_size_on(volume: Any) -> int:
    """How large CDI left disk.img (it grows the image to the space it may use on Filesystem volumes)."""
    return os.path.getsize(Path(volume.mount_point) / "disk.img")


def diagnose(node: NodeHandle, namespace: str) -> str:
    """What CDI did in `namespace` (DataVolumes, claims, worker pods, events), for a failure message."""
    lines: list[str] = []
    for dv in (node.api.get(f"{CDI_API}/namespaces/{namespace}/datavolumes") or {}).get("items", []):
        lines.append(f"DataVolume {dv['metadata']['name']}: {dv.get('status')}")
    claims = node.api.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims") or {}
    for pvc in claims.get("items", []):
        request = pvc["spec"]["resources"]["requests"]["storage"]
        lines.append(f"PVC {pvc['metadata']['name']}: {pvc['status'].get('phase')} request={request}")
    for pod in (node.api.get(f"/api/v1/namespaces/{namespace}/pods") or {}).get("items", []):
        states = [s.get("state") for s in pod["status"].get("containerStatuses") or []]
        lines.append(f"pod {pod['metadata']['name']}: {pod['status'].get('phase')} {states}")
    events = (node.api.get(f"/api/v1/namespaces/{namespace}/events") or {}).get("items", [])
    for event in events[-25:]:
        subject = event["involvedObject"]["name"]
        lines.append(f"event {subject}: {event.get('reason')}: {event.get('message')}")
    return "\n".join(lines)


def wait_or_diagnose(node: NodeHandle, namespace: str, what: str, probe: Any, timeout_s: float) -> Any:
    """wait_until, whose failure message also says what CDI did in the namespace."""
    try:
        return wait_until(what, probe, timeout_s, 1.0)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{diagnose(node, namespace)}") from None


# ------------------------------------------------------------------------------------- the operator's VMs

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
UDSVM_API = "/apis/uds.dev/v1alpha1"


def http_udsvm(
    namespace: str,
    name: str,
    url: str,
    digest: str,
    virtual_size: int,
    *,
    volume_mode: str = "Filesystem",
) -> dict[str, Any]:
    """A UDSVirtualMachine importing `url` over HTTP with a declared digest, on the node's local class."""
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {"http": {"url": url, "checksum": digest}},
            "disk": {
                "virtualSize": virtual_size,
                "storageClassName": "udsvm-local",
                "volumeMode": volume_mode,
            },
        },
    }


def vm_status(node: NodeHandle, namespace: str, name: str) -> dict[str, Any]:
    vm = node.api.get(f"{UDSVM_API}/namespaces/{namespace}/udsvirtualmachines/{name}") or {}
    return dict(vm.get("status") or {})


def await_verified(
    node: NodeHandle, namespace: str, name: str, what: str, timeout_s: float
) -> dict[str, Any]:
    """The VM's status once the operator reports its disk verified (by CDI's checksum or its verifier pod);
    the tests then assert *who* verified it and against which digest."""

    def verified() -> dict[str, Any] | None:
        status = vm_status(node, namespace, name)
        return status if status.get("checksumVerified") else None

    return dict(wait_or_diagnose(node, namespace, what, verified, timeout_s))


class ScratchOffer:
    """Give each scratch claim CDI makes for a DataVolume (`<dv>-scratch`) a volume, as a provisioner does.

    Call it on every poll while an import runs: CDI may ask for scratch space only after its importer looked
    at the source, and a restarted cdi-controller or importer asks again with a new claim (tracked by UID).
    """

    def __init__(self, node: NodeHandle, namespace: str, dv_name: str, filesystem: str = "ext4") -> None:
        self.node, self.namespace, self.dv_name, self.filesystem = node, namespace, dv_name, filesystem
        self.offered: set[str] = set()

    def __call__(self) -> None:
        name = f"{self.dv_name}-scratch"
        claim = self.node.api.get(f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims/{name}")
        if claim and claim["metadata"]["uid"] not in self.offered and not claim["spec"].get("volumeName"):
            offer_volume(self.node, self.namespace, name, self.filesystem)
            self.offered.add(claim["metadata"]["uid"])


def await_import(
    node: NodeHandle,
    namespace: str,
    dv_name: str,
    filesystem: str = "ext4",
    *,
    timeout_s: float = 300.0,
    target: Any = None,
    scratch: ScratchOffer | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Give CDI's claims (the target unless already offered as `target`, and, if CDI asks for one, its
    scratch claim) real volumes of exactly their requested size, and wait until CDI ends the import either
    way; returns (target volume, DV)."""
    if target is None:
        target = offer_volume(node, namespace, dv_name, filesystem)
    offer_scratch = scratch if scratch is not None else ScratchOffer(node, namespace, dv_name, filesystem)

    def finished() -> dict[str, Any] | None:
        offer_scratch()
        dv = datavolume(node, namespace, dv_name) or {}
        return dv if (dv.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    what = f"CDI to finish importing {dv_name}"
    return target, wait_or_diagnose(node, namespace, what, finished, timeout_s)
