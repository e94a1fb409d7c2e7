"""Root DataVolume: exact PVC size under spec.pvc, CDI source mapping, checksum only where CDI has it."""

from __future__ import annotations

from typing import Any

import pytest

from uds_vm_operator.api import SpecError, parse_vm_spec
from uds_vm_operator.render import ClusterFacts, Owner, expected_pvc_size
from uds_vm_operator.render.datavolume import (
    BIND_IMMEDIATE_ANNOTATION,
    render_drivers_datavolume,
    render_root_datavolume,
    render_system_datavolume,
)

OWNER = Owner("web", "apps", "uid-1")
SHA = "sha256:" + "c" * 64
NEW_CDI = ClusterFacts(cdi_http_checksum=True)
OLD_CDI = ClusterFacts(cdi_http_checksum=False)


def dv(raw: dict[str, Any], facts: ClusterFacts = OLD_CDI) -> dict[str, Any]:
    return render_root_datavolume(OWNER, parse_vm_spec(raw), facts)


@pytest.mark.parametrize(
    ("virtual_size", "overhead", "expected"),
    [
        ("10Mi", 6, "300Mi"),
        ("1Gi", 6, "1216Mi"),
        ("40Gi", 6, "43418Mi"),
        (500 * 2**20 + 1, 6, "693Mi"),
        ("40Gi", 0, "41152Mi"),
    ],
)
def test_pvc_is_exactly_the_deterministic_size(virtual_size: int | str, overhead: int, expected: str) -> None:
    raw = {"source": {"upload": {}}, "disk": {"virtualSize": virtual_size, "overheadPercent": overhead}}
    manifest = dv(raw)
    # spec.pvc is passed to the PVC verbatim; spec.storage would be inflated by CDI a second time.
    assert "storage" not in manifest["spec"]
    assert manifest["spec"]["pvc"]["resources"]["requests"]["storage"] == expected
    assert expected_pvc_size(parse_vm_spec(raw)) == expected


def test_pvc_carries_explicit_access_and_volume_mode() -> None:
    pvc = dv({"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}})["spec"]["pvc"]
    assert pvc["accessModes"] == ["ReadWriteOnce"]
    assert pvc["volumeMode"] == "Filesystem"
    assert "storageClassName" not in pvc
    declared = dv(
        {
            "source": {"upload": {}},
            "disk": {
                "virtualSize": "1Gi",
                "accessModes": ["ReadWriteMany"],
                "volumeMode": "Block",
                "storageClassName": "ceph",
            },
        }
    )["spec"]["pvc"]
    assert (declared["accessModes"], declared["volumeMode"], declared["storageClassName"]) == (
        ["ReadWriteMany"],
        "Block",
        "ceph",
    )


def test_upload_never_gets_a_checksum_and_binds_immediately() -> None:
    manifest = dv({"source": {"upload": {"checksum": SHA}}, "disk": {"virtualSize": "1Gi"}}, NEW_CDI)
    assert manifest["spec"]["source"] == {"upload": {}}
    assert manifest["metadata"]["annotations"][BIND_IMMEDIATE_ANNOTATION] == "true"


@pytest.mark.parametrize(("facts", "has_checksum"), [(NEW_CDI, True), (OLD_CDI, False)])
def test_http_checksum_only_where_cdi_supports_it(facts: ClusterFacts, has_checksum: bool) -> None:
    raw = {
        "source": {
            "http": {"url": "https://img/x.qcow2", "checksum": SHA, "secretRef": "s", "certConfigMap": "ca"}
        },
        "disk": {"virtualSize": "1Gi"},
    }
    http = dv(raw, facts)["spec"]["source"]["http"]
    assert http["url"] == "https://img/x.qcow2"
    assert (http["secretRef"], http["certConfigMap"]) == ("s", "ca")
    assert ("checksum" in http) is has_checksum
    if has_checksum:
        assert http["checksum"] == SHA


@pytest.mark.parametrize(
    ("source", "expected_key", "expected"),
    [
        (
            {"s3": {"url": "s3://b/k", "secretRef": "s3c"}},
            "source",
            {"s3": {"url": "s3://b/k", "secretRef": "s3c"}},
        ),
        (
            {"registry": {"url": "docker://r/i:1", "pullMethod": "node"}},
            "source",
            {"registry": {"url": "docker://r/i:1", "pullMethod": "node"}},
        ),
        ({"pvc": {"name": "base"}}, "source", {"pvc": {"name": "base", "namespace": "apps"}}),
        (
            {"pvc": {"name": "base", "namespace": "img"}},
            "source",
            {"pvc": {"name": "base", "namespace": "img"}},
        ),
        ({"blank": {}}, "source", {"blank": {}}),
        (
            {"dataSource": {"name": "ubuntu", "namespace": "golden"}},
            "sourceRef",
            {"kind": "DataSource", "name": "ubuntu", "namespace": "golden"},
        ),
    ],
)
def test_sources_map_onto_the_cdi_schema(
    source: dict[str, Any], expected_key: str, expected: dict[str, Any]
) -> None:
    spec = dv({"source": source, "disk": {"virtualSize": "1Gi"}})["spec"]
    assert spec[expected_key] == expected
    assert ("source" in spec) != ("sourceRef" in spec), "CDI wants exactly one of source/sourceRef"


@pytest.mark.parametrize("source", [{"dataSource": {"name": "golden"}}, {"pvc": {"name": "base"}}])
def test_clone_without_size_lets_cdi_infer_it(source: dict[str, Any]) -> None:
    spec = dv({"source": source})["spec"]
    assert "pvc" not in spec
    assert "resources" not in spec["storage"]
    assert expected_pvc_size(parse_vm_spec({"source": source})) is None
    # Always written: a StorageProfile without claim property sets gives CDI no access mode to pick.
    assert spec["storage"]["accessModes"] == ["ReadWriteOnce"]
    declared = dv({"source": source, "disk": {"accessModes": ["ReadWriteMany"]}})["spec"]
    assert declared["storage"]["accessModes"] == ["ReadWriteMany"]


@pytest.mark.parametrize(
    "source",
    [
        {"upload": {}},
        {"http": {"url": "https://x/y"}},
        {"s3": {"url": "s3://b/k"}},
        {"registry": {"url": "docker://r"}},
    ],
)
def test_import_without_size_is_a_spec_error(source: dict[str, Any]) -> None:
    with pytest.raises(SpecError, match=r"spec\.disk\.virtualSize is required for source .*uds-vmctl prep"):
        dv({"source": source})


def test_metadata_name_labels_and_owner() -> None:
    manifest = dv({"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}})
    assert manifest["apiVersion"] == "cdi.kubevirt.io/v1beta1"
    assert manifest["kind"] == "DataVolume"
    meta = manifest["metadata"]
    assert (meta["name"], meta["namespace"]) == ("web-dv", "apps")
    assert meta["labels"]["uds.dev/vm"] == "web"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "uds-vm-operator"
    assert meta["labels"]["recurring-job-group.longhorn.io/default"] == "enabled"
    assert meta["ownerReferences"] == [OWNER.reference()]


def test_windows_iso_system_disk_and_driver_clone() -> None:
    spec = parse_vm_spec(
        {
            "os": "windows",
            "source": {"upload": {}},
            "disk": {"virtualSize": "5Gi"},
            "windows": {"systemDiskSize": "64Gi", "driverMedia": {"dataSource": {"name": "virtio-win"}}},
        }
    )
    system = render_system_datavolume(OWNER, spec)
    assert system["metadata"]["name"] == "web-system"
    assert system["spec"]["source"] == {"blank": {}}
    assert system["spec"]["pvc"]["resources"]["requests"]["storage"] == "69469Mi"  # pvc_size(64 GiB)
    drivers = render_drivers_datavolume(OWNER, spec)
    assert drivers is not None
    assert drivers["metadata"]["name"] == "web-drivers"
    assert drivers["spec"]["sourceRef"] == {"kind": "DataSource", "name": "virtio-win", "namespace": "apps"}
    no_media = parse_vm_spec({"os": "windows", "source": {"upload": {}}, "disk": {"virtualSize": "5Gi"}})
    assert render_drivers_datavolume(OWNER, no_media) is None
