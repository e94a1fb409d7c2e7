"""The Lula validations' rego, judged by the evaluator on objects the operator's renderers produce."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from tests.unit.compliance_fixtures import (
    TAMPERS,
    backup_evidence,
    chart_clusterroles,
    children,
    compliant_objects,
    snapshot_of,
    udsvm,
)
from uds_vm_operator.compliance.component import LinkedControl, load_component_definition
from uds_vm_operator.compliance.controls import CONTROLS
from uds_vm_operator.compliance.evaluate import VM_API, assess

VM = "web"
NS = "apps"
NOW = datetime(2026, 12, 3, 22, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def controls() -> list[LinkedControl]:
    return load_component_definition(None)


def compliant_namespace() -> list[dict]:
    """The compliant VM with its children and backup evidence (which brings the restored VM), and RBAC."""
    return [*compliant_objects(VM, NS, now=NOW), *chart_clusterroles()]


def states(controls: list[LinkedControl], objects: list[dict]) -> dict[str, bool]:
    findings = assess(controls, snapshot_of(objects), now=NOW)
    return {f.control_id: f.satisfied for f in findings if f.vm.name == VM}


def test_a_compliant_vm_satisfies_every_control(controls: list[LinkedControl]) -> None:
    result = states(controls, compliant_namespace())
    assert result == {c.control_id: True for c in CONTROLS}


def test_every_vm_of_the_compliant_namespace_satisfies_every_control(controls: list[LinkedControl]) -> None:
    """The restored VM the backup evidence brings is itself compliant, so it adds no failure of its own."""
    findings = assess(controls, snapshot_of(compliant_namespace()), now=NOW)
    assert {str(f.vm) for f in findings} == {f"{NS}/{VM}", f"{NS}/{VM}-restored"}
    assert [(str(f.vm), f.control_id) for f in findings if not f.satisfied] == []


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_tampering_one_piece_of_evidence_flips_exactly_its_control(
    controls: list[LinkedControl], tamper: str
) -> None:
    control_id, change = TAMPERS[tamper]
    objects = copy.deepcopy(compliant_namespace())
    change(objects, VM)
    result = states(controls, objects)
    flipped = sorted(c for c, ok in result.items() if not ok)
    assert flipped == [control_id]


def test_missing_children_are_not_satisfied_rather_than_passing_vacuously(
    controls: list[LinkedControl],
) -> None:
    result = states(controls, [udsvm(VM, NS), *chart_clusterroles()])
    assert not any(result[c] for c in ("sc-7", "ac-3", "ia-5", "sc-13", "si-2", "cm-6", "cp-9", "cp-10"))
    assert result["si-7"] and result["ac-6"]  # their evidence lives on the VM status and the RBAC


def test_each_vm_is_judged_on_its_own_evidence(controls: list[LinkedControl]) -> None:
    objects = [
        *compliant_namespace(),
        *compliant_objects("db", NS, "00000000-0000-4000-8000-000000000002", NOW),
    ]
    TAMPERS["ssh-password-auth"][1](objects, "db")
    findings = assess(controls, snapshot_of(objects), now=NOW)
    failing = {(str(f.vm), f.control_id) for f in findings if not f.satisfied}
    assert failing == {(f"{NS}/db", "ia-5")}


def test_objects_of_another_namespace_are_not_evidence(controls: list[LinkedControl]) -> None:
    objects = [udsvm(VM, NS), *children(VM, "elsewhere"), *chart_clusterroles()]
    objects += backup_evidence(VM, "elsewhere", now=NOW)
    result = states(controls, objects)
    assert not result["sc-7"] and not result["ia-5"]
    assert not result["cp-9"] and not result["cp-10"]  # backups and restores of another namespace


def test_no_vm_means_no_findings(controls: list[LinkedControl]) -> None:
    snapshot = snapshot_of(chart_clusterroles())
    snapshot[VM_API] = []
    assert assess(controls, snapshot) == []


def test_the_opt_in_cluster_flavour_of_the_chart_fails_ac6_naming_secrets_and_pods(
    controls: list[LinkedControl],
) -> None:
    """rbac.scope=cluster binds the workload role in every namespace: AC-6 must say what that grants."""
    import subprocess  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    root = Path(__file__).resolve().parents[2]
    helm = subprocess.run([str(root / "tools/helm/build.sh")], capture_output=True, text=True, check=True)
    rendered = subprocess.run(
        [
            helm.stdout.strip(),
            "template",
            "x",
            str(root / "chart"),
            "--set",
            "rbac.scope=cluster",
            "--set",
            "image.allowUnpinned=true",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rbac = [
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc and doc["kind"] in ("ClusterRole", "ClusterRoleBinding")
    ]
    objects = [*compliant_objects(VM, NS, now=NOW), *rbac]
    findings = [f for f in assess(controls, snapshot_of(objects), now=NOW) if f.vm.name == VM]
    ac6 = next(f for f in findings if f.control_id == "ac-6")
    assert not ac6.satisfied
    text = " ".join(line for o in ac6.observations for line in o.verdict.observations)
    assert "reads Secrets in every namespace" in text and "creates pods in every namespace" in text
    assert all(f.satisfied for f in findings if f.control_id != "ac-6")
