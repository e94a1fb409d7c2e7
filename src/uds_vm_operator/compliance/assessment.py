"""Write findings as OSCAL assessment results, shaped like ``lula validate`` output.

One observation per validation and VM (its verdict and rego messages as evidence); one finding per control
and VM, ``satisfied`` only when every observation behind it passed.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from uds_vm_operator import __version__
from uds_vm_operator.compliance.component import LULA_NS, OSCAL_VERSION
from uds_vm_operator.compliance.evaluate import Finding, Observation
from uds_vm_operator.runtime.timestamps import rfc3339

SATISFIED = "satisfied"
NOT_SATISFIED = "not-satisfied"


def _observation(observation: Observation, observation_id: str, collected: str) -> dict[str, Any]:
    state = SATISFIED if observation.verdict.passed else NOT_SATISFIED
    evidence = "; ".join(observation.verdict.observations) or "(no message)"
    return {
        "uuid": observation_id,
        "title": f"{observation.validation.name} on {observation.vm}",
        "description": f"[TEST]: {observation.validation.name} on {observation.vm}",
        "props": [
            {"name": "validation", "ns": LULA_NS, "value": f"#{observation.validation.uuid}"},
            {"name": "vm", "ns": LULA_NS, "value": str(observation.vm)},
        ],
        "methods": ["TEST"],
        "relevant-evidence": [{"description": f"Result: {state}", "remarks": evidence}],
        "collected": collected,
    }


def build_assessment_results(
    findings: Sequence[Finding],
    *,
    control_ids: Sequence[str],
    component_href: str,
    started: datetime,
    finished: datetime,
) -> dict[str, Any]:
    """The assessment-results document (rooted at ``assessment-results``) for one evaluation run."""
    collected = rfc3339(finished)
    observations, oscal_findings = _observations_and_findings(findings, collected)
    result = _result(control_ids, started, finished, observations, oscal_findings)
    return {
        "assessment-results": {
            "uuid": str(uuid.uuid4()),
            "metadata": {
                "title": "uds-vm-operator assessment results",
                "last-modified": collected,
                "version": __version__,
                "oscal-version": OSCAL_VERSION,
            },
            "import-ap": {"href": component_href},
            "results": [result],
        }
    }


def _observations_and_findings(
    findings: Sequence[Finding], collected: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An observation per validation and VM, shared by the controls it backs; a finding per control and VM."""
    observation_ids: dict[tuple[str, str], str] = {}
    observations = []
    oscal_findings = []
    for finding in findings:
        related = []
        for observation in finding.observations:
            key = (observation.validation.uuid, str(observation.vm))
            if key not in observation_ids:
                observation_ids[key] = str(uuid.uuid4())
                observations.append(_observation(observation, observation_ids[key], collected))
            related.append({"observation-uuid": observation_ids[key]})
        oscal_findings.append(_finding(finding, related))
    return observations, oscal_findings


def _finding(finding: Finding, related: list[dict[str, str]]) -> dict[str, Any]:
    state = SATISFIED if finding.satisfied else NOT_SATISFIED
    return {
        "uuid": str(uuid.uuid4()),
        "title": f"{finding.control_id} {finding.vm}",
        "description": f"Control {finding.control_id} for UDSVirtualMachine {finding.vm}: {state}",
        "target": {
            "type": "objective-id",
            "target-id": f"{finding.control_id}_smt",
            "status": {"state": state},
        },
        "related-observations": related,
    }


def _result(
    control_ids: Sequence[str],
    started: datetime,
    finished: datetime,
    observations: list[dict[str, Any]],
    oscal_findings: list[dict[str, Any]],
) -> dict[str, Any]:
    """The run's one result; OSCAL wants ``observations`` and ``findings`` left out rather than empty."""
    result: dict[str, Any] = {
        "uuid": str(uuid.uuid4()),
        "title": "uds-vm-operator compliance validation",
        "description": "Lula validations of uds-vm-operator, evaluated per VM on live objects.",
        "start": rfc3339(started),
        "end": rfc3339(finished),
        "reviewed-controls": {
            "control-selections": [
                {
                    "description": "Controls implemented by uds-vm-operator",
                    "include-controls": [{"control-id": c} for c in sorted(control_ids)],
                }
            ]
        },
    }
    if observations:
        result["observations"] = observations
    if oscal_findings:
        result["findings"] = oscal_findings
    return result


def summary(findings: Sequence[Finding]) -> list[dict[str, Any]]:
    """A compact, script-friendly view: one entry per VM with each control's state and failure messages."""
    by_vm: dict[str, dict[str, Any]] = {}
    for finding in findings:
        entry = by_vm.setdefault(
            str(finding.vm),
            {"namespace": finding.vm.namespace, "name": finding.vm.name, "controls": {}, "messages": {}},
        )
        entry["controls"][finding.control_id] = SATISFIED if finding.satisfied else NOT_SATISFIED
        if not finding.satisfied:
            entry["messages"][finding.control_id] = [
                m for o in finding.observations for m in o.verdict.observations
            ]
    return list(by_vm.values())
