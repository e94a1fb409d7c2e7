"""zarf.yaml against Zarf's real zarf.schema.json (Go module github.com/zarf-dev/zarf at ZARF_VERSION)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[2]


@cache
def validator() -> Draft202012Validator:
    result = subprocess.run(
        [str(ROOT / "tools/zarf/fetch-schema.sh")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, (
        f"could not fetch zarf.schema.json (needs Go and the module proxy): {result.stderr}"
    )
    schema = json.loads(Path(result.stdout.strip()).read_text())
    assert schema["$schema"].endswith("2020-12/schema")
    return Draft202012Validator(schema)


def package() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "zarf.yaml").read_text())


def test_zarf_yaml_passes_the_upstream_schema() -> None:
    errors = [f"{e.json_path}: {e.message}" for e in validator().iter_errors(package())]
    assert errors == []


def test_the_schema_really_rejects_mistakes() -> None:
    broken = copy.deepcopy(package())
    broken["components"][1]["charts"][0]["noWiat"] = True
    del broken["metadata"]["name"]
    messages = " ".join(e.message for e in validator().iter_errors(broken))
    assert "noWiat" in messages and "'name' is a required property" in messages


def test_package_has_the_operator_components() -> None:
    doc = package()
    assert doc["kind"] == "ZarfPackageConfig" and doc["metadata"]["name"] == "uds-vm-operator"
    components = {c["name"]: c for c in doc["components"]}
    assert components["uds-vm-operator-crds"]["required"] is True
    operator = components["uds-vm-operator"]
    chart = yaml.safe_load((ROOT / "chart/Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "chart/values.yaml").read_text())
    assert (
        operator["charts"][0]["localPath"] == "chart" and operator["charts"][0]["version"] == chart["version"]
    )
    # Every image the chart deploys must be in the package, or it cannot be pulled in the air gap; pinned by
    # the digest `make zarf-build` stamps (the chart gets the same digest), its cosign signature beside it.
    reference = f"{values['image']['repository']}:{values['image']['tag']}"
    assert operator["images"] == [
        f"{reference}@###ZARF_PKG_TMPL_OPERATOR_DIGEST###",
        f"{values['image']['repository']}:###ZARF_PKG_TMPL_OPERATOR_SIGNATURE_TAG###",
    ]
    constants = {c["name"]: c["value"] for c in doc["constants"]}
    assert constants["OPERATOR_IMAGE_DIGEST"] == "###ZARF_PKG_TMPL_OPERATOR_DIGEST###"
    (values_file,) = operator["charts"][0]["valuesFiles"]
    assert yaml.safe_load((ROOT / values_file).read_text()) == {
        "image": {"digest": "###ZARF_CONST_OPERATOR_IMAGE_DIGEST###"}
    }
    golden = components["golden-image"]
    assert golden["required"] is False and golden["manifests"][0]["noWait"] is True


def test_every_file_the_package_ships_exists() -> None:
    for component in package()["components"]:
        for manifest in component.get("manifests", []):
            for name in manifest["files"]:
                assert (ROOT / name).is_file(), f"{component['name']}: {name} is missing (make crds?)"
        for chart in component.get("charts", []):
            assert (ROOT / chart["localPath"] / "Chart.yaml").is_file()


def test_the_crds_component_ships_every_generated_crd() -> None:
    crds = next(c for c in package()["components"] if c["name"] == "uds-vm-operator-crds")
    shipped = sorted(f for m in crds["manifests"] for f in m["files"] if f.startswith("deploy/crds/"))
    generated = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "deploy/crds").glob("*.yaml"))
    assert shipped == generated, "list every deploy/crds/*.yaml in zarf.yaml (component uds-vm-operator-crds)"


def test_zarf_variables_used_in_manifests_are_declared() -> None:
    declared = {v["name"] for v in package()["variables"]}
    text = (ROOT / "deploy/golden-image/golden-image.yaml").read_text() + (ROOT / "zarf.yaml").read_text()
    used = set(re.findall(r"###ZARF_VAR_([A-Z0-9_]+)###", text))
    assert used and used <= declared


def test_the_operator_namespace_is_created_restricted_before_the_chart() -> None:
    crds = next(c for c in package()["components"] if c["name"] == "uds-vm-operator-crds")
    assert crds["manifests"][0]["files"] == ["zarf/namespace.yaml"]
    (zarf_namespace,) = yaml.safe_load_all((ROOT / "zarf/namespace.yaml").read_text())
    kubectl_namespace = next(yaml.safe_load_all((ROOT / "deploy/namespace.yaml").read_text()))
    assert zarf_namespace == kubectl_namespace
    assert zarf_namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
