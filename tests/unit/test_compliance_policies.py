"""The Lula validations' rego, judged by the evaluator on objects the operator's renderers produce."""

from __future__ import annotations

import copy

import pytest
from compliance_fixtures import TAMPERS, chart_clusterroles, children, snapshot_of, udsvm

from uds_vm_operator.compliance.component import LinkedControl, load_component_definition
from uds_vm_operator.compliance.controls import CONTROLS
from uds_vm_operator.compliance.evaluate import VM_API, assess

VM = "web"
NS = "apps"


@pytest.fixture(scope="module")
def controls() -> list[LinkedControl]:
    return load_component_definition(None)


def compliant_objects() -> list[dict]:
    return [udsvm(VM, NS), *children(VM, NS), *chart_clusterroles()]


def states(controls: list[LinkedControl], objects: list[dict]) -> dict[str, bool]:
    findings = assess(controls, snapshot_of(objects))
    return {f.control_id: f.satisfied for f in findings if f.vm.name == VM}


def test_a_compliant_vm_satisfies_every_control(controls: list[LinkedControl]) -> None:
    result = states(controls, compliant_objects())
    assert result == {c.control_id: True for c in CONTROLS}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_tampering_one_piece_of_evidence_flips_exactly_its_control(
    controls: list[LinkedControl], tamper: str
) -> None:
    control_id, change = TAMPERS[tamper]
    objects = copy.deepcopy(compliant_objects())
    change(objects, VM)
    result = states(controls, objects)
    flipped = sorted(c for c, ok in result.items() if not ok)
    assert flipped == [control_id]


def test_missing_children_are_not_satisfied_rather_than_passing_vacuously(
    controls: list[LinkedControl],
) -> None:
    result = states(controls, [udsvm(VM, NS), *chart_clusterroles()])
    assert not any(result[c] for c in ("sc-7", "ac-3", "ia-5", "sc-13", "si-2", "cm-6", "cp-9"))
    assert result["si-7"] and result["ac-6"]  # their evidence lives on the VM status and the RBAC


def test_each_vm_is_judged_on_its_own_evidence(controls: list[LinkedControl]) -> None:
    objects = [*compliant_objects(), udsvm("db", NS, uid="00000000-0000-4000-8000-000000000002")]
    objects += children("db", NS, uid="00000000-0000-4000-8000-000000000002")
    TAMPERS["ssh-password-auth"][1](objects, "db")
    findings = assess(controls, snapshot_of(objects))
    failing = {(str(f.vm), f.control_id) for f in findings if not f.satisfied}
    assert failing == {(f"{NS}/db", "ia-5")}


def test_objects_of_another_namespace_are_not_evidence(controls: list[LinkedControl]) -> None:
    objects = [udsvm(VM, NS), *children(VM, "elsewhere"), *chart_clusterroles()]
    result = states(controls, objects)
    assert not result["sc-7"] and not result["ia-5"]


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
    objects = [udsvm(VM, NS), *children(VM, NS), *rbac]
    findings = [f for f in assess(controls, snapshot_of(objects)) if f.vm.name == VM]
    ac6 = next(f for f in findings if f.control_id == "ac-6")
    assert not ac6.satisfied
    text = " ".join(line for o in ac6.observations for line in o.verdict.observations)
    assert "reads Secrets in every namespace" in text and "creates pods in every namespace" in text
    assert all(f.satisfied for f in findings if f.control_id != "ac-6")
