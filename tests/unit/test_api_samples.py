"""Every sample under samples/ is a valid UDSVirtualMachine that renders (the README points users at them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from uds_vm_operator.api import VM_API_VERSION, VM_KIND, parse_vm_spec, validate_vm_name
from uds_vm_operator.render import ClusterFacts, Owner, render_children

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "samples").glob("*.yaml"))
EXPECTED = {
    "linux-upload.yaml",
    "linux-http.yaml",
    "windows-iso.yaml",
    "windows-clone.yaml",
    "vpn-egress.yaml",
    "exposed-http.yaml",
}


def test_the_promised_samples_exist() -> None:
    assert {path.name for path in SAMPLES} >= EXPECTED


@pytest.mark.parametrize("path", SAMPLES, ids=lambda path: path.name)
def test_sample_parses_and_renders(path: Path) -> None:
    manifest: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert (manifest["apiVersion"], manifest["kind"]) == (VM_API_VERSION, VM_KIND)
    validate_vm_name(manifest["metadata"]["name"])
    spec = parse_vm_spec(manifest["spec"])
    children = render_children(
        Owner(manifest["metadata"]["name"], manifest["metadata"]["namespace"], "uid"),
        spec,
        ClusterFacts(cdi_http_checksum=True),
        windows_admin_password="Sample-Passw0rd!",
    )
    assert any(child["kind"] == "VirtualMachine" for child in children)
