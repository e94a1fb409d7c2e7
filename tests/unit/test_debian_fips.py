"""Debian guests cannot enter FIPS mode: `fips: true` there is rendered honestly, never reported satisfied."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from tests.unit.compliance_fixtures import (
    SPEC,
    STATUS,
    backup_evidence,
    chart_clusterroles,
    edit_userdata,
    find,
    snapshot_of,
)
from uds_vm_operator.api.models import parse_vm_spec
from uds_vm_operator.compliance.assessment import build_assessment_results
from uds_vm_operator.compliance.component import LinkedControl, load_component_definition
from uds_vm_operator.compliance.controls import CONTROLS
from uds_vm_operator.compliance.evaluate import Finding, assess
from uds_vm_operator.render.cloudinit import (
    FIPS_CAPABLE_FLAVORS,
    render_cloudinit_secret,
    render_user_data,
)
from uds_vm_operator.render.common import ClusterFacts, Owner
from uds_vm_operator.render.datadisks import render_data_disks
from uds_vm_operator.render.networkpolicy import render_network_policy
from uds_vm_operator.render.virtualmachine import render_virtual_machine

VM, NS, UID = "deb", "apps", "00000000-0000-4000-8000-0000000000de"


def debian_spec(fips: bool = True) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec["cloudInit"] |= {"flavor": "debian", "fips": fips}
    return spec


def debian_objects(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The Debian VM as the API returns it plus every child the operator renders for it, and its backup
    evidence (CP-9, CP-10)."""
    owner = Owner(VM, NS, UID)
    parsed = parse_vm_spec(spec)
    vm = {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachine",
        "metadata": {"name": VM, "namespace": NS, "uid": UID},
        "spec": spec,
        "status": copy.deepcopy(STATUS),
    }
    return [
        vm,
        render_network_policy(owner, parsed),
        render_cloudinit_secret(owner, parsed),
        render_virtual_machine(owner, parsed, ClusterFacts(cdi_http_checksum=True)),
        *render_data_disks(owner, parsed),
        *backup_evidence(VM, NS, UID),
        *chart_clusterroles(),
    ]


@pytest.fixture(scope="module")
def controls() -> list[LinkedControl]:
    return load_component_definition(None)


def findings_of(controls: list[LinkedControl], objects: list[dict[str, Any]]) -> dict[str, Finding]:
    return {f.control_id: f for f in assess(controls, snapshot_of(objects)) if f.vm.name == VM}


def test_debian_is_not_a_fips_capable_flavour() -> None:
    assert "debian" not in FIPS_CAPABLE_FLAVORS and {"ubuntu", "rhel"} <= FIPS_CAPABLE_FLAVORS


def test_debian_user_data_claims_no_fips_mode() -> None:
    document = yaml.safe_load(render_user_data(Owner(VM, NS, UID), parse_vm_spec(debian_spec())))
    commands = " ".join(str(c) for c in document["runcmd"])
    assert "ubuntu_pro" not in document and "power_state" not in document
    assert "fips-mode-setup" not in commands
    assert "auditd" in document["packages"] and "systemctl restart ssh" in document["runcmd"]


def test_debian_with_fips_true_fails_sc13_and_only_sc13(controls: list[LinkedControl]) -> None:
    found = findings_of(controls, debian_objects(debian_spec()))
    assert {c for c, f in found.items() if not f.satisfied} == {"sc-13"}
    assert set(found) == {c.control_id for c in CONTROLS}


def test_forged_fips_evidence_in_debian_user_data_still_fails_sc13(controls: list[LinkedControl]) -> None:
    # Someone edits the Secret to look like RHEL/Ubuntu FIPS evidence; the flavour still decides.
    objects = debian_objects(debian_spec())

    def forge(document: dict[str, Any]) -> None:
        document["runcmd"].append("fips-mode-setup --enable")
        document["ubuntu_pro"] = {"enable": ["fips-updates"]}

    edit_userdata(find(objects, "Secret", f"{VM}-cloudinit"), forge)
    found = findings_of(controls, objects)
    assert not found["sc-13"].satisfied
    messages = " ".join(m for o in found["sc-13"].observations for m in o.verdict.observations)
    assert "debian cannot enter FIPS mode" in messages


def test_oscal_results_mark_debian_fips_not_satisfied(controls: list[LinkedControl]) -> None:
    findings = [f for f in assess(controls, snapshot_of(debian_objects(debian_spec()))) if f.vm.name == VM]
    now = datetime.now(UTC)
    results = build_assessment_results(
        findings, control_ids=[c.control_id for c in CONTROLS], component_href="x", started=now, finished=now
    )
    states = {
        f["target"]["target-id"]: f["target"]["status"]["state"]
        for f in results["assessment-results"]["results"][0]["findings"]
    }
    assert states["sc-13_smt"] == "not-satisfied"
    assert states["ac-3_smt"] == "satisfied"
