"""Rendered DataVolumes, VirtualMachines and HTTPRoutes against the real upstream CRD schemas, offline.

The schemas are the ones the control plane installs (CDI, KubeVirt, Gateway API at the pinned tags, cached
by tools/envtest/fetch_crds.py), and for VirtualMachines also every tag in KUBEVIRT_SCHEMA_VERSIONS (the
installed v1.8.4 and the newest v1.9.0). The checker mirrors what ``fieldValidation=Strict`` and the OpenAPI
validation of a real API server reject: unknown fields, wrong types, values outside an enum, missing
required fields. The integration tier repeats this against a live kube-apiserver; this copy fails fast and
runs without one.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kubevirt_variants import enumerate_variants, vm_kubevirt_paths
from tools.envtest.fetch_crds import ensure_crds, ensure_kubevirt_crds
from tools.envtest.pinned_versions import kubevirt_schema_versions, pinned_versions
from uds_vm_operator.api import parse_vm_spec
from uds_vm_operator.render import ClusterFacts, Owner, render_children

SHA = "sha256:" + "e" * 64
SPECS: dict[str, dict[str, Any]] = {
    "upload": {"source": {"upload": {"checksum": SHA}}, "disk": {"virtualSize": "10Mi"}},
    "http": {
        "source": {
            "http": {"url": "https://img/x.qcow2", "checksum": SHA, "secretRef": "s", "certConfigMap": "ca"}
        },
        "disk": {"virtualSize": "1Gi", "accessModes": ["ReadWriteMany"], "volumeMode": "Block"},
        "liveMigration": True,
        "firmware": {"type": "efi-secureboot", "tpm": True},
    },
    "registry": {
        "source": {"registry": {"url": "docker://r/i:1", "pullMethod": "node"}},
        "disk": {"virtualSize": "1Gi"},
    },
    "s3": {"source": {"s3": {"url": "s3://b/k", "secretRef": "c"}}, "disk": {"virtualSize": "1Gi"}},
    "clone": {
        "source": {"dataSource": {"name": "golden", "namespace": "images"}},
        "resources": {"instancetype": "u1.small", "preference": "ubuntu"},
        "dataDisks": [{"name": "data", "size": "1Gi"}],
        "network": {
            "expose": [
                {
                    "port": 443,
                    "http": {"hostname": "a.example.com", "gateway": {"name": "g", "namespace": "gw"}},
                }
            ]
        },
    },
    "pvc": {"source": {"pvc": {"name": "base"}}, "disk": {"virtualSize": "1Gi"}},
    "blank": {"source": {"blank": {}}, "disk": {"virtualSize": "1Gi"}},
    "windows-iso": {
        "os": "windows",
        "source": {"upload": {}},
        "disk": {"virtualSize": "5Gi"},
        "windows": {"sysprep": {"mode": "iso"}, "driverMedia": {"dataSource": {"name": "virtio-win"}}},
    },
    "windows-clone": {
        "os": "windows",
        "source": {"dataSource": {"name": "win"}},
        "windows": {"driverMedia": {"pvc": "v"}},
    },
}
CHECKED_KINDS = {
    ("cdi.kubevirt.io/v1beta1", "DataVolume"): "datavolumes.cdi.kubevirt.io.yaml",
    ("kubevirt.io/v1", "VirtualMachine"): "virtualmachines.kubevirt.io.yaml",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproutes.gateway.networking.k8s.io.yaml",
}


def _crd_folder() -> Path:
    try:
        return ensure_crds(pinned_versions())
    except Exception as error:  # the message must say how to get the schemas, not just fail
        pytest.fail(
            f"the upstream CRD cache is missing and could not be fetched ({error}); run "
            "`python -m tools.envtest.fetch_crds` (needs Go and the Go module proxy) or `make cluster-up`"
        )


@functools.cache
def _schema(folder: Path, filename: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((folder / filename).read_text(encoding="utf-8"))
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema: dict[str, Any] = entry["schema"]["openAPIV3Schema"]
            return schema
    raise AssertionError(f"{filename} has no version {version}")


_TYPES = {"string": str, "boolean": bool, "object": dict, "array": list}


def schema_violations(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """What a Strict API server would reject in ``value`` under ``schema`` (structural subset)."""
    problems: list[str] = []
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            problems.append(f"{path}: expected int or string")
        return problems
    kind = schema.get("type")
    if kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(f"{path}: expected integer, got {type(value).__name__}")
        return problems
    if kind == "number":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            problems.append(f"{path}: expected number")
        return problems
    if kind in _TYPES and not isinstance(value, _TYPES[kind]):
        return [f"{path}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict) and (kind == "object" or "properties" in schema):
        problems += _object_violations(value, schema, path)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            problems += schema_violations(item, schema["items"], f"{path}[{index}]")
    return problems


def _object_violations(value: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
    """Unknown, mistyped and missing fields of one object."""
    problems: list[str] = []
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
    for key, item in value.items():
        if key in properties:
            problems += schema_violations(item, properties[key], f"{path}.{key}")
        elif isinstance(extra, dict):
            problems += schema_violations(item, extra, f"{path}.{key}")
        elif not preserve and path != ".metadata":
            problems.append(f"{path}.{key}: unknown field")
    for key in schema.get("required", []):
        if key not in value:
            problems.append(f"{path}.{key}: required")
    return problems


def test_checker_catches_unknown_fields_types_and_enums() -> None:
    schema = {
        "type": "object",
        "required": ["a"],
        "properties": {"a": {"type": "string", "enum": ["x"]}, "n": {"type": "integer"}},
    }
    assert schema_violations({"a": "x", "n": 1}, schema) == []
    problems = schema_violations({"a": "y", "n": "1", "zzz": True}, schema)
    assert any("not in" in p for p in problems)
    assert any("expected integer" in p for p in problems)
    assert any("zzz: unknown field" in p for p in problems)
    assert schema_violations({}, schema) == [".a: required"]


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("cdi_http_checksum", [True, False])
def test_rendered_children_fit_the_upstream_schemas(name: str, cdi_http_checksum: bool) -> None:
    folder = _crd_folder()
    children = render_children(
        Owner(f"vm-{name}", "apps", "uid-1"),
        parse_vm_spec(SPECS[name]),
        ClusterFacts(cdi_http_checksum=cdi_http_checksum),
        windows_admin_password="Generated-Passw0rd!",
    )
    checked = 0
    for child in children:
        filename = CHECKED_KINDS.get((child["apiVersion"], child["kind"]))
        if filename is None:
            continue
        version = child["apiVersion"].rsplit("/", 1)[1]
        assert schema_violations(child, _schema(folder, filename, version)) == [], (child["kind"], name)
        checked += 1
    assert checked >= 2  # at least the root DataVolume and the VirtualMachine


def test_checker_rejects_what_the_real_schemas_reject() -> None:
    folder = _crd_folder()
    children = render_children(Owner("vm", "apps", "uid-1"), parse_vm_spec(SPECS["upload"]), ClusterFacts())
    dv = copy.deepcopy(next(c for c in children if c["kind"] == "DataVolume"))
    dv["spec"]["source"]["upload"]["checksum"] = SHA  # CDI has no upload checksum (issue #4104)
    dv["spec"]["pvc"]["volumeMode"] = 7
    problems = schema_violations(
        dv, _schema(folder, CHECKED_KINDS[("cdi.kubevirt.io/v1beta1", "DataVolume")], "v1beta1")
    )
    assert any("upload.checksum: unknown field" in p for p in problems)
    assert any("volumeMode: expected string" in p for p in problems)
    vm = copy.deepcopy(next(c for c in children if c["kind"] == "VirtualMachine"))
    vm["spec"]["template"]["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] = "no"
    problems = schema_violations(
        vm, _schema(folder, CHECKED_KINDS[("kubevirt.io/v1", "VirtualMachine")], "v1")
    )
    assert any("autoattachGraphicsDevice: expected boolean" in p for p in problems), problems


@functools.cache
def _variants() -> dict[str, dict[str, Any]]:
    return enumerate_variants().vms


def _kubevirt_folder(version: str) -> Path:
    try:
        return ensure_kubevirt_crds(version)
    except Exception as error:
        pytest.fail(
            f"KubeVirt {version}'s CRDs could not be fetched ({error}); "
            "run python -m tools.envtest.fetch_crds"
        )


def test_schema_versions_cover_the_installed_and_the_newest_kubevirt() -> None:
    versions = kubevirt_schema_versions()
    assert versions[0] == pinned_versions().kubevirt == "v1.8.4"
    assert "v1.9.0" in versions


@pytest.mark.parametrize("version", kubevirt_schema_versions())
def test_every_rendered_vm_variant_fits_each_kubevirt_schema(version: str) -> None:
    schema = _schema(_kubevirt_folder(version), CHECKED_KINDS[("kubevirt.io/v1", "VirtualMachine")], "v1")
    variants = _variants()
    assert len(variants) >= 600  # the option space (tests/kubevirt_variants.py); a shrink is a regression
    rejected = {
        name: problems for name, vm in variants.items() if (problems := schema_violations(vm, schema))
    }
    assert rejected == {}, f"{len(rejected)} of {len(variants)} refused by KubeVirt {version}"


def _schema_has(schema: dict[str, Any], path: str) -> bool:
    node: dict[str, Any] = schema
    for part in path.strip(".").split("."):
        if node.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in node:
            return True  # ObjectMeta (kept whole by the API server) and maps: their keys are data
        key, is_list = (part[:-2], True) if part.endswith("[]") else (part, False)
        if key not in node.get("properties", {}):
            return False
        node = node["properties"][key]
        if is_list:
            node = node.get("items", {})
    return True


@pytest.mark.parametrize("version", kubevirt_schema_versions())
def test_every_field_the_renderer_emits_is_declared_by_each_kubevirt_schema(version: str) -> None:
    """Stricter than pruning: each emitted spec path must be a declared property, not preserved-unknown."""
    schema = _schema(_kubevirt_folder(version), CHECKED_KINDS[("kubevirt.io/v1", "VirtualMachine")], "v1")
    paths = set().union(*(vm_kubevirt_paths(vm["spec"], ".spec") for vm in _variants().values()))
    assert {
        ".spec.template.spec.domain.firmware.bootloader.efi.secureBoot",
        ".spec.instancetype.name",
    } <= paths
    undeclared = sorted(path for path in paths if not _schema_has(schema, path))
    assert undeclared == [], f"KubeVirt {version} does not declare {undeclared}"
