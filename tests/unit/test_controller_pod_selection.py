"""Whether the VM's live NetworkPolicy selects the pod KubeVirt runs the VM in, and what status says when
it does not (issue 16, scope 5: never `zeroTrust: true` for a policy that isolates nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from uds_vm_operator.controller.pod_selection import policy_selects_vm, selector_matches
from uds_vm_operator.controller.status import Observation, derive_status

LABELS = {"uds.dev/vm": "web", "app.kubernetes.io/managed-by": "uds-vm-operator"}


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        ({}, True),  # an empty selector selects every pod of the namespace
        ({"matchLabels": {"uds.dev/vm": "web"}}, True),
        ({"matchLabels": {"uds.dev/vm": "db"}}, False),
        ({"matchLabels": {"uds.dev/vm": "web", "extra": "x"}}, False),  # a label added by someone else
        ({"matchExpressions": [{"key": "uds.dev/vm", "operator": "In", "values": ["web", "db"]}]}, True),
        ({"matchExpressions": [{"key": "uds.dev/vm", "operator": "NotIn", "values": ["web"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}, True),
        ({"matchExpressions": [{"key": "uds.dev/vm", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "uds.dev/vm", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "uds.dev/vm", "operator": "Gt", "values": ["1"]}]}, False),
        (None, False),
    ],
)
def test_label_selector_semantics(selector: dict[str, Any] | None, selected: bool) -> None:
    assert selector_matches(selector, LABELS) is selected


def kubevirt_vm(labels: dict[str, str]) -> dict[str, Any]:
    return {"spec": {"template": {"metadata": {"labels": labels}, "spec": {}}}}


def policy(match: dict[str, str]) -> dict[str, Any]:
    return {"spec": {"podSelector": {"matchLabels": match}}}


def test_the_policy_is_judged_against_the_labels_kubevirt_gives_the_launcher_pod() -> None:
    assert policy_selects_vm(policy({"uds.dev/vm": "web"}), kubevirt_vm(LABELS))
    assert not policy_selects_vm(policy({"uds.dev/vm": "web"}), kubevirt_vm({"uds.dev/vm": "other"}))
    assert not policy_selects_vm(policy({"uds.dev/vm": "web"}), {"spec": {}})  # a VM without template labels
    assert not policy_selects_vm(None, kubevirt_vm(LABELS))
    assert policy_selects_vm(policy({"uds.dev/vm": "web"}), None)  # no VM rendered yet: no pod to miss


def test_a_policy_selecting_no_pod_is_not_isolation_and_never_zero_trust() -> None:
    observation = Observation(
        generation=1,
        network_isolated=True,  # even if a caller got this wrong, selecting nothing wins
        network_selects_no_pod=True,
        zero_trust=True,
        hardening_secret="cloud-init",
        hardening_in_place=True,
    )
    status = derive_status(observation, None, "2026-01-02T03:04:05Z")
    isolated = next(c for c in status["conditions"] if c["type"] == "NetworkIsolated")
    assert (isolated["status"], isolated["reason"]) == ("False", "NetworkPolicySelectsNoPod")
    assert status["zeroTrust"] is False
