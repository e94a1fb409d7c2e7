"""The CRD is generated from the models: structural, stable byte for byte, the committed copy current."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from uds_vm_operator.api import crdgen
from uds_vm_operator.api.crdgen import VM_CRD, crd_yaml, main, render_crd, structural_schema
from uds_vm_operator.api.models import CHECKSUM_PATTERN, UDSVirtualMachineSpec

REPO = Path(__file__).resolve().parents[2]


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for name, prop in node.get("properties", {}).items():
            found += _walk(prop, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            found += _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            found += _walk(node["additionalProperties"], f"{path}{{}}")
    return found


def _schema() -> dict[str, Any]:
    crd = render_crd(VM_CRD)
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_generation_is_deterministic() -> None:
    assert crd_yaml(VM_CRD) == crd_yaml(VM_CRD)


def test_committed_crd_matches_the_models() -> None:
    committed = REPO / "deploy" / "crds" / VM_CRD.filename
    assert committed.exists(), "run `make crds` to generate deploy/crds"
    assert committed.read_text(encoding="utf-8") == crd_yaml(VM_CRD), "run `make crds` and commit the result"


def test_schema_is_structural() -> None:
    for path, node in _walk(_schema()):
        for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "const", "title", "$defs"):
            assert forbidden not in node, f"{path}: {forbidden}"
        assert node.get("additionalProperties") is not False, path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"


def test_names_scope_subresources_and_version() -> None:
    crd = render_crd(VM_CRD)
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "udsvirtualmachines.uds.dev"
    assert spec["group"] == "uds.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["udsvm"]
    assert spec["names"]["categories"] == ["uds"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


def test_printer_columns() -> None:
    columns = render_crd(VM_CRD)["spec"]["versions"][0]["additionalPrinterColumns"]
    default = [c["name"] for c in columns if not c.get("priority")]
    wide = [c["name"] for c in columns if c.get("priority") == 1]
    assert default == [
        "PHASE",
        "SOURCE",
        "PVC-SIZE",
        "CHECKSUM-VERIFIED",
        "ZERO-TRUST",
        "GUEST",
        "RECONCILER",
        "AGE",
    ]
    assert wide == ["OS"]
    by_name = {c["name"]: c for c in columns}
    assert by_name["GUEST"]["jsonPath"] == ".status.guest.compliant"
    assert by_name["CHECKSUM-VERIFIED"]["jsonPath"] == ".status.checksumVerified"
    assert by_name["AGE"]["type"] == "date"


def test_validation_is_carried_into_the_schema() -> None:
    spec = _schema()["properties"]["spec"]
    source = spec["properties"]["source"]
    assert any("exactly one of spec.source" in rule["message"] for rule in source["x-kubernetes-validations"])
    assert source["properties"]["upload"]["properties"]["checksum"]["pattern"] == CHECKSUM_PATTERN
    assert spec["properties"]["runStrategy"]["enum"] == [
        "Always",
        "Halted",
        "Manual",
        "RerunOnFailure",
        "Once",
    ]
    assert spec["properties"]["runStrategy"]["default"] == "Always"
    size = spec["properties"]["disk"]["properties"]["virtualSize"]
    assert size["x-kubernetes-int-or-string"] is True
    assert "matches(" in size["x-kubernetes-validations"][0]["rule"]
    computer = spec["properties"]["windows"]["properties"]["computerName"]
    assert computer["maxLength"] == 15
    assert any("all digits" in rule["message"] for rule in computer["x-kubernetes-validations"])
    root_rules = [rule["rule"] for rule in _schema()["x-kubernetes-validations"]]
    assert any("self.metadata.name.size() <= 52" in rule for rule in root_rules)


def test_every_string_and_list_is_bounded_for_cel_cost_estimation() -> None:
    for path, node in _walk(_schema()):
        if path.startswith(".metadata") or path in (".apiVersion", ".kind"):
            continue
        if node.get("type") == "string" and "enum" not in node and "format" not in node:
            assert "maxLength" in node, f"{path}: unbounded string"
        if node.get("type") == "array":
            assert "maxItems" in node, f"{path}: unbounded list"
        if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
            assert "maxProperties" in node, f"{path}: unbounded map"


def test_only_scalar_defaults_reach_the_api_server() -> None:
    for path, node in _walk(_schema()):
        if "default" in node:
            assert not isinstance(node["default"], (dict, list)), path


def test_int_or_string_union_is_the_only_union() -> None:
    class Broken(UDSVirtualMachineSpec):
        extra_union: int | list[int] | None = None

    with pytest.raises(crdgen.SchemaError, match="union"):
        structural_schema(Broken)


def test_write_then_check_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 0
    written = yaml.safe_load((tmp_path / VM_CRD.filename).read_text(encoding="utf-8"))
    assert written["kind"] == "CustomResourceDefinition"
    assert main(["--check", str(tmp_path)]) == 0
    assert "match the models" in capsys.readouterr().out


def test_check_reports_drift_with_a_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main([str(tmp_path)])
    target = tmp_path / VM_CRD.filename
    target.write_text(target.read_text(encoding="utf-8").replace("udsvm", "uvm"), encoding="utf-8")
    capsys.readouterr()
    assert main(["--check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "-    - uvm" in out and "+    - udsvm" in out
    assert "make crds" in out


def test_check_of_a_missing_file_is_drift(tmp_path: Path) -> None:
    assert main(["--check", str(tmp_path)]) == 1


def test_a_file_instead_of_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x", encoding="utf-8")
    assert main([str(not_a_dir)]) == 2
