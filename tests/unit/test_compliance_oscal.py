"""The OSCAL documents: the committed component definition and generated assessment results pass trestle."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from trestle.oscal.assessment_results import AssessmentResults
from trestle.oscal.component import ComponentDefinition
from typer.testing import CliRunner

from tests.unit.compliance_fixtures import chart_clusterroles, compliant_objects, find, snapshot_of
from uds_vm_operator.cli.main import app
from uds_vm_operator.compliance.assessment import build_assessment_results
from uds_vm_operator.compliance.component import load_component_definition, main, read_component_definition
from uds_vm_operator.compliance.errors import ComponentDefinitionError
from uds_vm_operator.compliance.evaluate import assess
from uds_vm_operator.compliance.validation import packaged_validations, parse_validation

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "compliance" / "oscal-component.yaml"
REQUIRED_CONTROLS = {"sc-7", "ac-3", "ia-5", "si-7", "ac-6", "cm-6", "sc-13", "si-2", "cp-9", "cp-10"}


def test_component_definition_passes_trestle() -> None:
    definition = ComponentDefinition.oscal_read(COMPONENT)
    requirements = definition.components[0].control_implementations[0].implemented_requirements
    assert {r.control_id for r in requirements} == REQUIRED_CONTROLS


def test_component_definition_is_generated_from_the_packaged_validations() -> None:
    assert main([str(COMPONENT), "--check"]) == 0, (
        "run: python -m uds_vm_operator.compliance.component " + str(COMPONENT)
    )


def test_control_ids_are_oscal_lower_case() -> None:
    doc = yaml.safe_load(COMPONENT.read_text())
    ids = [
        r["control-id"]
        for c in doc["component-definition"]["components"]
        for ci in c["control-implementations"]
        for r in ci["implemented-requirements"]
    ]
    assert all(re.fullmatch(r"[a-z]{2}-\d+(\.\d+)?", i) for i in ids), ids


def test_every_lula_link_resolves_to_a_back_matter_validation() -> None:
    controls = read_component_definition(yaml.safe_load(COMPONENT.read_text()))
    assert {c.control_id for c in controls} == REQUIRED_CONTROLS
    assert all(len(c.validations) == 1 for c in controls)


def test_a_dangling_link_is_a_usage_error_not_a_finding() -> None:
    doc = yaml.safe_load(COMPONENT.read_text())
    doc["component-definition"]["back-matter"]["resources"].pop(0)
    with pytest.raises(ComponentDefinitionError, match="names no back-matter resource"):
        read_component_definition(doc)


def test_validations_follow_lulas_rules() -> None:
    validations = packaged_validations()
    assert len({v.uuid for v in validations}) == len(validations)
    for v in validations:
        assert v.rego.startswith("package validate\n\n"), v.name  # Lula's blank-line pattern
        assert v.validation_query == "validate.validate"
        assert all(r.version and r.resource for r in v.resources)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("metadata: {name: x, uuid: not-a-uuid}\ndomain: {}\nprovider: {}\n", "not a version 1-5 UUID"),
        ("bogus: 1\n", "top-level keys"),
        (": [\n", "not valid YAML"),
    ],
)
def test_malformed_validations_are_refused_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(ComponentDefinitionError, match=message):
        parse_validation(text)


def test_assessment_results_pass_trestle(tmp_path: Path) -> None:
    controls = load_component_definition(COMPONENT)
    # The compliant VM and its backup evidence: two VMs (web and the VM restored from its backup).
    objects = [*compliant_objects("web", "apps"), *chart_clusterroles()]
    find(objects, "UDSVirtualMachine", "web")["status"]["checksumVerified"] = False
    findings = assess(controls, snapshot_of(objects))
    now = datetime.now(UTC)
    doc = build_assessment_results(
        findings,
        control_ids=[c.control_id for c in controls],
        component_href=str(COMPONENT),
        started=now,
        finished=now,
    )
    path = tmp_path / "assessment-results.yaml"
    path.write_text(yaml.safe_dump(doc))
    results = AssessmentResults.oscal_read(path).results[0]
    assert len(results.observations) == 2 * len(controls)  # one per validation and VM
    states = {f.title: f.target.status.state.value for f in results.findings}
    assert len(states) == 2 * len(controls)
    assert states["si-7 apps/web"] == "not-satisfied"
    assert {s for t, s in states.items() if t != "si-7 apps/web"} == {"satisfied"}


def test_cli_reports_usage_errors_with_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    both = runner.invoke(app, ["compliance", "validate", "-n", "a", "--all-namespaces"])
    assert both.exit_code == 2 and "not both" in both.output
    missing = runner.invoke(app, ["compliance", "validate", "--kubeconfig", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "kubeconfig" in missing.output
    bad = tmp_path / "c.yaml"
    bad.write_text("component-definition: {}\n")
    broken = runner.invoke(app, ["compliance", "validate", "--component", str(bad)])
    assert broken.exit_code == 2 and "component definition" in broken.output
