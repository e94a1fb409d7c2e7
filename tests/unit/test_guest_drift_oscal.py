"""Drift found inside a running guest (status.guest.drift, issue 34) flips the control it belongs to.

The Lula validations of AC-3, IA-5, SI-2 and SC-13 read ``status.guest`` of each UDSVirtualMachine: a drift
item naming the control is a violation of that control and of no other; a guest the operator could not read
(``compliant: Unknown``) keeps the drift it was last seen with, so it still fails those controls. Judged on
the shared compliant fixture (compliance_fixtures) and on that fixture with spec.monitoring on, rendered by
the operator's own renderers, which also proves the monitored user data (report script, units) stays
readable to rego-cpp's ``yaml.unmarshal``; with both the packaged validations and the committed
compliance/oscal-component.yaml. SC-7 admits the exporter's one ingress rule of a monitored VM, and only from
named pods.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.unit.compliance_fixtures import (
    SPEC,
    backup_evidence,
    chart_clusterroles,
    children,
    snapshot_of,
    udsvm,
)
from uds_vm_operator.api.models import parse_vm_spec
from uds_vm_operator.compliance.component import LinkedControl, load_component_definition
from uds_vm_operator.compliance.controls import CONTROLS
from uds_vm_operator.compliance.evaluate import Finding, assess
from uds_vm_operator.controller.guest_checks import GuestFacts, judge
from uds_vm_operator.render.cloudinit import render_cloudinit_secret
from uds_vm_operator.render.common import ClusterFacts, Owner
from uds_vm_operator.render.datadisks import render_data_disks
from uds_vm_operator.render.networkpolicy import render_network_policy
from uds_vm_operator.render.virtualmachine import render_virtual_machine

VM = "web"
NS = "apps"
UID = "00000000-0000-4000-8000-000000000001"
COMPONENT_FILE = Path(__file__).resolve().parents[2] / "compliance" / "oscal-component.yaml"
MONITORED_SPEC: dict[str, Any] = {**copy.deepcopy(SPEC), "monitoring": {"enabled": True}}
DRIFT = {
    "ac-3": {"setting": "PermitRootLogin", "control": "ac-3", "observed": "not no", "expected": "no"},
    "ia-5": {"setting": "PasswordAuthentication", "control": "ia-5", "observed": "yes", "expected": "no"},
    "si-2": {
        "setting": "apt-daily-upgrade.timer",
        "control": "si-2",
        "observed": "inactive",
        "expected": "active",
    },
    "sc-13": {"setting": "FIPS mode", "control": "sc-13", "observed": "off", "expected": "on"},
}


@pytest.fixture(scope="module", params=["packaged", "committed-file"])
def controls(request: pytest.FixtureRequest) -> list[LinkedControl]:
    return load_component_definition(None if request.param == "packaged" else COMPONENT_FILE)


def monitored_objects(
    name: str = VM, uid: str = UID, guest: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The compliant fixture VM with spec.monitoring on, its children, its backup evidence (CP-9, CP-10),
    and ``status.guest``."""
    owner = Owner(name, NS, uid)
    spec = parse_vm_spec(MONITORED_SPEC)
    vm = udsvm(name, NS, uid=uid)
    vm["spec"] = copy.deepcopy(MONITORED_SPEC)
    if guest is not None:
        vm["status"]["guest"] = guest
    return [
        vm,
        render_network_policy(owner, spec),
        render_cloudinit_secret(owner, spec),
        render_virtual_machine(owner, spec, ClusterFacts(cdi_http_checksum=True)),
        *render_data_disks(owner, spec),
        *backup_evidence(name, NS, uid),
    ]


def drifted(*items: dict[str, str], compliant: str = "False") -> dict[str, Any]:
    return {"compliant": compliant, "reason": "GuestDrifted", "drift": [dict(item) for item in items]}


def findings(controls: list[LinkedControl], objects: list[dict[str, Any]]) -> dict[str, Finding]:
    return {f.control_id: f for f in assess(controls, snapshot_of(objects)) if f.vm.name == VM}


def flipped(controls: list[LinkedControl], objects: list[dict[str, Any]]) -> list[str]:
    return sorted(c for c, f in findings(controls, objects).items() if not f.satisfied)


def drift_flips(controls: list[LinkedControl], guest: dict[str, Any]) -> list[str]:
    """The controls this ``status.guest`` takes away from the monitored VM (compared with no guest status)."""
    before = set(flipped(controls, [*monitored_objects(), *chart_clusterroles()]))
    after = set(flipped(controls, [*monitored_objects(guest=guest), *chart_clusterroles()]))
    assert before <= after, "a guest status satisfied a control its VM failed without it"
    return sorted(after - before)


def observations(finding: Finding) -> str:
    return " ".join(text for o in finding.observations for text in o.verdict.observations)


def test_a_monitored_compliant_guest_satisfies_every_control(controls: list[LinkedControl]) -> None:
    objects = [*monitored_objects(), *chart_clusterroles()]
    assert {c: f.satisfied for c, f in findings(controls, objects).items()} == {
        c.control_id: True for c in CONTROLS
    }


def test_a_monitored_guest_satisfies_the_controls_it_reports_on(controls: list[LinkedControl]) -> None:
    """The monitored user data (report script, units) is still readable to every cloud-init check."""
    hardened = {"compliant": "True", "reason": "GuestHardened", "loggedInUsers": ["ubuntu"]}
    for guest in (None, hardened):
        result = findings(controls, [*monitored_objects(guest=guest), *chart_clusterroles()])
        assert [
            c
            for c in ("ac-3", "ia-5", "si-2", "sc-13", "si-7", "cm-6", "cp-9", "cp-10", "ac-6")
            if not result[c].satisfied
        ] == []
    assert drift_flips(controls, hardened) == []


@pytest.mark.parametrize("control_id", sorted(DRIFT))
def test_drift_naming_a_control_flips_that_control_only(
    controls: list[LinkedControl], control_id: str
) -> None:
    item = DRIFT[control_id]
    assert drift_flips(controls, drifted(item)) == [control_id]
    objects = [*monitored_objects(guest=drifted(item)), *chart_clusterroles()]
    message = f"{NS}/{VM}: the running guest drifted: {item['setting']} is {item['observed']}"
    assert message in observations(findings(controls, objects)[control_id])


@pytest.mark.parametrize("control_id", sorted(DRIFT))
def test_on_a_fully_compliant_vm_drift_flips_exactly_its_control(
    controls: list[LinkedControl], control_id: str
) -> None:
    """The shared compliant fixture (every control satisfied) with a guest status: nothing else moves."""
    vm = udsvm(VM, NS)
    vm["status"]["guest"] = drifted(DRIFT[control_id])
    result = findings(controls, [vm, *children(VM, NS), *backup_evidence(VM, NS), *chart_clusterroles()])
    assert sorted(c for c, f in result.items() if not f.satisfied) == [control_id]


def test_drift_naming_several_controls_flips_each(controls: list[LinkedControl]) -> None:
    assert drift_flips(controls, drifted(DRIFT["ac-3"], DRIFT["sc-13"])) == ["ac-3", "sc-13"]


def test_a_guest_that_stopped_answering_keeps_failing_the_controls_it_drifted_in(
    controls: list[LinkedControl],
) -> None:
    # Hiding the agent must not clear a control: the drift last seen is carried while the guest is Unknown.
    assert drift_flips(controls, drifted(*DRIFT.values(), compliant="Unknown")) == sorted(DRIFT)
    assert drift_flips(controls, drifted(DRIFT["ia-5"], compliant="Unknown")) == ["ia-5"]


def test_drift_of_a_control_without_a_guest_check_flips_nothing(controls: list[LinkedControl]) -> None:
    other = {"setting": "something", "control": "cm-6", "observed": "x", "expected": "y"}
    assert drift_flips(controls, drifted(other)) == []  # cm-6 reads no guest drift (yet)


def test_the_judges_own_verdict_flips_the_controls_it_names(controls: list[LinkedControl]) -> None:
    """End to end: what ``judge`` stores in status.guest is what the validations read."""
    spec = parse_vm_spec(MONITORED_SPEC)
    report = {
        "sshd_config_readable": 1,
        "sshd_password_authentication": 1,
        "sshd_kbd_interactive_authentication": 0,
        "sshd_permit_root_login": 0,
        "root_password_locked": 1,
        "update_timer_active": 0,
        "fips_enabled": 1,
    }
    verdict = judge(spec, GuestFacts(report=report, users=("ubuntu",)))
    assert verdict.condition.status == "False"
    assert drift_flips(controls, verdict.status()) == ["ia-5", "si-2"]

    unknown = judge(spec, GuestFacts(problem=("NoGuestReport", "no report")))
    assert drift_flips(controls, unknown.status()) == []


def test_each_vm_is_judged_on_its_own_guest(controls: list[LinkedControl]) -> None:
    other_uid = "00000000-0000-4000-8000-000000000002"
    objects = [
        *monitored_objects(),
        *monitored_objects("db", other_uid, guest=drifted(DRIFT["ia-5"])),
        *chart_clusterroles(),
    ]
    failing = {(str(f.vm), f.control_id) for f in assess(controls, snapshot_of(objects)) if not f.satisfied}
    baseline = set(flipped(controls, [*monitored_objects(), *chart_clusterroles()]))
    assert failing - {(f"{NS}/{vm}", c) for vm in (VM, "db") for c in baseline} == {(f"{NS}/db", "ia-5")}
    assert (f"{NS}/{VM}", "ia-5") not in failing
