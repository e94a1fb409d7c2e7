"""Pure builders for what ``uds-vmctl prep --output-dir`` writes: no I/O, same facts in, same dicts out.

- the image record (every verified fact, with a schema version) as JSON and as a ConfigMap the operator
  reads to compare the digest it verifies in-cluster against what was sealed here;
- a UDSVirtualMachine that uploads this image (or clones the golden image);
- golden-image mode: a CDI DataVolume receiving the upload at the deterministic PVC size, and a DataSource
  pointing at its PVC;
- a Zarf package config whose one component carries the image file (with its SHA-256) and the manifests.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from uds_vm_operator import MANAGED_BY_LABEL
from uds_vm_operator.apiversions import CDI_API_VERSION, UDS_API_VERSION

RECORD_SCHEMA_VERSION = 1
RECORD_KIND = "UDSImageRecord"
RECORD_KEY = "image-record.json"
RECORD_LABEL = "uds.dev/image-record"
UDSVM_API_VERSION = UDS_API_VERSION
# Same defaults as render/datavolume.py (not imported: it pulls the pydantic models into `prep`'s start-up).
GOLDEN_ACCESS_MODES = ("ReadWriteOnce",)
GOLDEN_VOLUME_MODE = "Filesystem"
IMAGE_SUFFIXES = (
    ".gz",
    ".xz",
    ".zst",
    ".tar",
    ".ova",
    ".qcow2",
    ".img",
    ".raw",
    ".vmdk",
    ".vhdx",
    ".vhd",
    ".iso",
)


@dataclass(frozen=True)
class ManifestTarget:
    """Where and under which names the manifests go."""

    name: str
    namespace: str
    data_source_name: str | None = None  # set in golden-image mode

    @property
    def record_name(self) -> str:
        """Name of the ConfigMap holding the image record."""
        return f"{self.name}-image-record"


def default_name(file_name: str) -> str:
    """A DNS label derived from the image file name (``Ubuntu_22.04.qcow2.gz`` → ``ubuntu-22-04``)."""
    stem = file_name.lower()
    changed = True
    while changed:
        changed = False
        for suffix in IMAGE_SUFFIXES:
            if stem.endswith(suffix) and len(stem) > len(suffix):
                stem = stem[: -len(suffix)]
                changed = True
    cleaned = re.sub(r"[^a-z0-9]+", "-", stem).strip("-")[:63].strip("-")
    return cleaned or "vm"


def image_record(report: dict[str, Any], target: ManifestTarget) -> dict[str, Any]:
    """The sealed record: the prep report plus identity and schema version."""
    record: dict[str, Any] = {
        "schema_version": RECORD_SCHEMA_VERSION,
        "kind": RECORD_KIND,
        "name": target.name,
        "namespace": target.namespace,
    }
    record.update(report)
    return record


def image_record_configmap(record: dict[str, Any], target: ManifestTarget) -> dict[str, Any]:
    """A ConfigMap carrying the record verbatim under ``image-record.json``."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": target.record_name,
            "namespace": target.namespace,
            "labels": {RECORD_LABEL: "true", **MANAGED_BY_LABEL},
        },
        "data": {RECORD_KEY: json.dumps(record, indent=2, sort_keys=True) + "\n"},
    }


def udsvm_manifest(report: dict[str, Any], target: ManifestTarget) -> dict[str, Any]:
    """A UDSVirtualMachine for this image: upload with the file's checksum, or a clone of the golden image.

    A clone declares the raw-content digest (a clone copies disk content, not the file), so the operator's
    verifier checks the cloned disk, and with it the golden image, before the VM starts.
    """
    if target.data_source_name:
        clone: dict[str, Any] = {"name": target.data_source_name, "namespace": target.namespace}
        if report.get("content_sha256"):
            clone["checksum"] = report["content_sha256"]
        source: dict[str, Any] = {"dataSource": clone}
    else:
        source = {"upload": {"checksum": report["sha256"]}}
    return {
        "apiVersion": UDSVM_API_VERSION,
        "kind": "UDSVirtualMachine",
        "metadata": {
            "name": target.name,
            "namespace": target.namespace,
            "annotations": {RECORD_LABEL: target.record_name},
        },
        "spec": {
            "source": source,
            "disk": {"virtualSize": int(report["virtual_size_bytes"])},
            "imageRecord": target.record_name,
        },
    }


def golden_datavolume(report: dict[str, Any], target: ManifestTarget) -> dict[str, Any]:
    """The DataVolume the golden image is uploaded into, sized exactly by SPEC §4.

    ``spec.pvc`` rather than ``spec.storage``: CDI inflates a ``storage`` request by the filesystem overhead
    again, and SPEC §4 asks for exactly ``pvc_size`` (the same choice as ``render/datavolume.py``).
    """
    if not target.data_source_name:
        raise ValueError("golden-image mode needs a data source name")
    return {
        "apiVersion": CDI_API_VERSION,
        "kind": "DataVolume",
        "metadata": {
            "name": target.data_source_name,
            "namespace": target.namespace,
            "annotations": {RECORD_LABEL: target.record_name},
        },
        "spec": {
            "source": {"upload": {}},
            "pvc": {
                "accessModes": list(GOLDEN_ACCESS_MODES),
                "volumeMode": GOLDEN_VOLUME_MODE,
                "resources": {"requests": {"storage": report["pvc_size"]}},
            },
        },
    }


def golden_datasource(target: ManifestTarget) -> dict[str, Any]:
    """The DataSource VMs clone from; it points at the golden DataVolume's PVC (same name)."""
    if not target.data_source_name:
        raise ValueError("golden-image mode needs a data source name")
    return {
        "apiVersion": CDI_API_VERSION,
        "kind": "DataSource",
        "metadata": {"name": target.data_source_name, "namespace": target.namespace},
        "spec": {"source": {"pvc": {"name": target.data_source_name, "namespace": target.namespace}}},
    }


def zarf_package(
    report: dict[str, Any], target: ManifestTarget, image_path: str, manifest_files: list[str]
) -> dict[str, Any]:
    """A Zarf package config whose single component carries the image (checksummed) and the manifests.

    ``image_path`` and ``manifest_files`` are relative to the directory the file is written to, which is
    where ``zarf package create`` must run.
    """
    sha256_hex = str(report["sha256"]).split(":", 1)[1]
    file_name = str(report["file"])
    return {
        "kind": "ZarfPackageConfig",
        "metadata": {
            "name": f"{target.name}-vm-image",
            "description": f"VM disk image {file_name} and the manifests that deploy it",
        },
        "components": [
            {
                "name": f"{target.name}-vm-image",
                "required": True,
                "description": (
                    f"{report['format']} image, virtual size {report['virtual_size_bytes']} bytes, "
                    f"PVC {report['pvc_size']}, sha256 {sha256_hex}"
                ),
                "files": [{"source": image_path, "target": f"vm-images/{file_name}", "shasum": sha256_hex}],
                "manifests": [
                    {"name": f"{target.name}-vm", "namespace": target.namespace, "files": manifest_files}
                ],
            }
        ],
    }
