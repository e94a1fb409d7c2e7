"""The golden-image factory's manifests: the versioned clone DataVolume and the DataSource that publishes it.

Pure, like every renderer: :mod:`uds_vm_operator.controller.golden_image` decides *when* each is applied;
``uds-vmctl prep`` writes its own (lighter) golden-image manifests without importing the models.
"""

from __future__ import annotations

from typing import Any

from uds_vm_operator.api.models import GoldenImage, UDSVirtualMachineSpec
from uds_vm_operator.api.quantity import parse_bytes
from uds_vm_operator.apiversions import CDI_API_VERSION
from uds_vm_operator.child_names import system_dv_name
from uds_vm_operator.render.common import Owner, child_labels
from uds_vm_operator.render.datavolume import BIND_IMMEDIATE_ANNOTATION, exact_pvc, root_access_modes
from uds_vm_operator.sizing import pvc_size

GOLDEN_LABEL = "uds.dev/golden-image"
"""On clone DataVolumes and the DataSource: which golden image they belong to."""
GOLDEN_VERSION_LABEL = "uds.dev/golden-image-version"


def version_name(golden_name: str, version: int) -> str:
    """``<golden>-v<version>``: the clone DataVolume (and PVC) holding one published version."""
    return f"{golden_name}-v{version}"


def golden_labels(owner: Owner, golden: GoldenImage, version: int | None = None) -> dict[str, str]:
    """The factory's labels: the VM's child labels, the golden image and (on clones) its version."""
    labels = child_labels(owner, {GOLDEN_LABEL: golden.name})
    if version is not None:
        labels[GOLDEN_VERSION_LABEL] = str(version)
    return labels


def data_source(
    name: str, namespace: str, pvc_name: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A CDI DataSource ``name`` pointing at PVC ``pvc_name`` of the same namespace (what VMs clone from)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        metadata["labels"] = labels
    return {
        "apiVersion": CDI_API_VERSION,
        "kind": "DataSource",
        "metadata": metadata,
        "spec": {"source": {"pvc": {"name": pvc_name, "namespace": namespace}}},
    }


def render_clone_datavolume(owner: Owner, spec: UDSVirtualMachineSpec, golden: GoldenImage) -> dict[str, Any]:
    """The clone ``<golden>-v<version>`` of the build VM's system disk.

    Sized exactly like the system disk (a clone may not be smaller than its source, and an explicit size
    does not depend on CDI's size inference). No ownerReference: deleting the build VM must not take the
    published image with it. ``uds.dev/vm`` still routes its watch events to the build VM.
    """
    if spec.windows is None:
        raise ValueError("a golden image needs spec.windows")
    size = pvc_size(
        parse_bytes(spec.windows.system_disk_size, field="spec.windows.systemDiskSize"),
        spec.disk.overhead_percent,
    )
    return {
        "apiVersion": CDI_API_VERSION,
        "kind": "DataVolume",
        "metadata": {
            "name": version_name(golden.name, golden.version),
            "namespace": owner.namespace,
            "labels": golden_labels(owner, golden, golden.version),
            "annotations": {BIND_IMMEDIATE_ANNOTATION: "true"},
        },
        "spec": {
            "source": {"pvc": {"name": system_dv_name(owner.name), "namespace": owner.namespace}},
            "pvc": exact_pvc(
                size, root_access_modes(spec), spec.disk.volume_mode, spec.disk.storage_class_name
            ),
        },
    }


def render_data_source(owner: Owner, golden: GoldenImage) -> dict[str, Any]:
    """The CDI DataSource ``<golden>`` pointing at the published version (not owned, like the clones)."""
    return data_source(
        golden.name, owner.namespace, version_name(golden.name, golden.version), golden_labels(owner, golden)
    )
