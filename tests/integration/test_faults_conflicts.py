"""Conflicting writers: another field manager changes a child.

- A field the operator owns (NetworkPolicy egress, VirtualMachine runStrategy) is restored. Nothing polls:
  the child's watch event is what triggers the reconcile, which the test verifies by counting reconciles.
- A field the operator does not own (a label and an annotation someone else adds) is left alone, and the
  reconcile that sees it writes nothing (the child's resourceVersion does not move).
"""

from __future__ import annotations

from typing import Any

from tests.integration.operator_fixtures import (
    api,
    kv_path,
    netpol_path,
    operator,
    udsvm,
    vm_path,
    wait_phase,
)
from tests.integration.operator_harness import APPLY, Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api", "operator"]  # fixtures used by name

INTRUDER = "intruder"


def _settled(api: Api, operator: OperatorProcess, namespace: str, name: str) -> None:
    wait_phase(api, operator, namespace, name, "Pending")
    operator.wait_quiet(minimum=1)


def _settled_vm_policy(api: Api, operator: OperatorProcess, namespace: str) -> dict[str, Any]:
    """Apply the VM "web", let the operator settle, and return its NetworkPolicy as the server has it."""
    api.apply(udsvm("web", namespace), vm_path(namespace, "web"))
    _settled(api, operator, namespace, "web")
    policy = api.get(netpol_path(namespace, "web-netpol"))
    assert policy is not None
    return policy


def _intrude_allow_all(api: Api, namespace: str, policy: dict[str, Any], rules: str) -> None:
    """Another field manager force-applies an allow-all ``rules`` ("ingress"/"egress") list to the policy."""
    api.call(
        "PATCH",
        netpol_path(namespace, "web-netpol"),
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "web-netpol", "namespace": namespace},
            "spec": {"podSelector": policy["spec"]["podSelector"], rules: [{}]},
        },
        content_type=APPLY,
        params={"fieldManager": INTRUDER, "force": "true", "fieldValidation": "Strict"},
    )


def test_owned_child_fields_changed_by_another_manager_are_restored_by_the_child_watch(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    policy = _settled_vm_policy(api, operator, namespace)
    egress = policy["spec"]["egress"]

    count = operator.reconciles()
    _intrude_allow_all(api, namespace, policy, "egress")
    wait_for(
        lambda: (api.get(netpol_path(namespace, "web-netpol")) or {})["spec"].get("egress") == egress,
        30,
        0.1,
        what=f"egress restored: {egress} != {(api.get(netpol_path(namespace, 'web-netpol')) or {})['spec']}",
    )
    assert operator.reconciles() > count, "restored without a reconcile: something else wrote it back"

    # While the disk is unverified (SI-7) the operator holds the VM Halted: someone starting it is reverted.
    strategy = (api.get(kv_path(namespace, "web")) or {})["spec"]["runStrategy"]
    intruding = "Always" if strategy == "Halted" else "Halted"
    count = operator.reconciles()
    api.call(
        "PATCH",
        kv_path(namespace, "web"),
        {"spec": {"runStrategy": intruding}},
        content_type="application/merge-patch+json",
        params={"fieldManager": INTRUDER},
    )
    wait_for(
        lambda: (api.get(kv_path(namespace, "web")) or {})["spec"].get("runStrategy") == strategy,
        30,
        0.1,
        what=f"runStrategy restored\n{operator.logs()}",
    )
    assert operator.reconciles() > count


def test_an_ingress_rule_slipped_into_a_deny_all_policy_is_removed(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    """SC-7: the VM denies all ingress; an allow-all ingress rule added by another writer must not survive."""
    policy = _settled_vm_policy(api, operator, namespace)
    assert not policy["spec"].get("ingress"), "the default VM admits no ingress at all"

    count = operator.reconciles()
    _intrude_allow_all(api, namespace, policy, "ingress")
    wait_for(
        lambda: not (api.get(netpol_path(namespace, "web-netpol")) or {})["spec"].get("ingress"),
        30,
        0.1,
        what="the foreign allow-all ingress rule removed",
    )
    assert operator.reconciles() > count, "removed without a reconcile: something else wrote it back"
    restored = api.get(netpol_path(namespace, "web-netpol")) or {}
    assert restored["spec"].get("egress") == policy["spec"].get("egress")


def test_fields_the_operator_does_not_own_are_left_alone(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    api.apply(udsvm("db", namespace), vm_path(namespace, "db"))
    _settled(api, operator, namespace, "db")
    count = operator.reconciles()
    _, patched = api.call(
        "PATCH",
        kv_path(namespace, "db"),
        {"metadata": {"labels": {"team": "blue"}, "annotations": {"backup.example.com/schedule": "daily"}}},
        content_type="application/merge-patch+json",
        params={"fieldManager": INTRUDER},
    )
    version = patched["metadata"]["resourceVersion"]
    # The change itself is a watch event on our child: the operator reconciles and finds nothing to do.
    wait_for(lambda: operator.reconciles() > count, 30, 0.1, what="a reconcile after the foreign label")
    count = operator.reconciles()
    api.merge(vm_path(namespace, "db"), {"metadata": {"annotations": {"touch": "1"}}})  # one more, for sure
    wait_for(lambda: operator.reconciles() > count, 30, 0.1, what="a reconcile after touching the VM")
    operator.wait_quiet(minimum=count + 1)

    vm: dict[str, Any] = api.get(kv_path(namespace, "db")) or {}
    assert vm["metadata"]["labels"]["team"] == "blue"
    assert vm["metadata"]["annotations"]["backup.example.com/schedule"] == "daily"
    assert vm["metadata"]["resourceVersion"] == version, "the operator rewrote a child that needed nothing"
    managers = {m["manager"] for m in vm["metadata"]["managedFields"]}
    assert {INTRUDER, "uds-vm-operator"} <= managers
