"""Does the VM's live NetworkPolicy select the pod KubeVirt runs the VM in?

A NetworkPolicy only isolates the pods its ``podSelector`` selects. KubeVirt's virt-controller gives the
virt-launcher pod the labels of the VM's ``spec.template.metadata.labels`` (measured on the real node,
tests/node/test_kubevirt_vm_lifecycle.py), so evaluating the live policy's selector against the live VM's
template labels decides, without listing pods, whether the policy can reach the VM at all. Comparing the
policy with what we render is not enough: server-side apply keeps a label another field manager added to
``podSelector.matchLabels``, and such a policy is "in place as rendered" while it selects nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from uds_vm_operator.render.exposure import LAUNCHER_LABELS


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Kubernetes label-selector semantics (matchLabels AND every matchExpression; ``{}`` selects all).

    An operator we do not know selects nothing: claiming isolation on a guess would be the unsafe answer.
    """
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In":
            ok = present and labels[key] in values
        elif operator == "NotIn":
            ok = not present or labels[key] not in values
        elif operator == "Exists":
            ok = present
        elif operator == "DoesNotExist":
            ok = not present
        else:
            return False
        if not ok:
            return False
    return True


def template_labels(virtual_machine: Mapping[str, Any]) -> dict[str, str]:
    """The labels the VM's virt-launcher pod carries: those KubeVirt copies from the VM's template, plus
    ``kubevirt.io: virt-launcher``, which virt-controller puts on every launcher pod itself (the rendered
    policy selects it, so CDI's worker pods, which copy the DataVolume's labels, are not selected)."""
    template = (virtual_machine.get("spec") or {}).get("template") or {}
    return {**dict((template.get("metadata") or {}).get("labels") or {}), **LAUNCHER_LABELS}


def policy_selects_vm(policy: Mapping[str, Any] | None, virtual_machine: Mapping[str, Any] | None) -> bool:
    """True when the policy would select the VM's launcher pod; with no VM (none rendered yet) there is no
    pod the policy could miss, so only a missing policy is False."""
    if policy is None:
        return False
    if virtual_machine is None:
        return True
    selector = (policy.get("spec") or {}).get("podSelector")
    return selector_matches(selector, template_labels(virtual_machine))
