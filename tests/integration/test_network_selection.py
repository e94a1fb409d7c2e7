"""A NetworkPolicy that selects none of the VM's pods isolates nothing, and the status must say so.

Server-side apply keeps a field another manager added, so a ``podSelector`` widened by an extra label
still compares "in place as rendered" while it selects no pod at all. The operator judges the live policy's
selector against the live KubeVirt VM's template labels (the labels virt-controller gives the launcher pod,
tests/node/test_kubevirt_vm_lifecycle.py) and reports ``NetworkIsolated=False``, never ``zeroTrust: true``.
"""

from __future__ import annotations

from typing import Any

from tests.integration.operator_fixtures import (
    api,
    condition,
    kv_path,
    netpol_path,
    operator,
    status_of,
    udsvm,
    vm_path,
)
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api", "operator"]  # fixtures used by name


def isolation(api: Api, namespace: str, name: str) -> tuple[str, str, bool] | None:
    status = status_of(api, namespace, name)
    found = [c for c in status.get("conditions") or [] if c["type"] == "NetworkIsolated"]
    return (found[0]["status"], found[0]["reason"], status.get("zeroTrust")) if found else None


def wait_isolation(
    api: Api, operator: OperatorProcess, namespace: str, want: tuple[str, str, bool]
) -> dict[str, Any]:
    try:
        wait_for(lambda: isolation(api, namespace, "web") == want, 60, 0.3, what=f"NetworkIsolated {want}")
    except AssertionError as error:
        raise AssertionError(
            f"{error}\nstatus: {status_of(api, namespace, 'web')}\n{operator.logs()}"
        ) from None
    return status_of(api, namespace, "web")


def test_a_policy_whose_selector_matches_no_launcher_pod_is_not_isolation(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    api.apply(udsvm("web", namespace), vm_path(namespace, "web"))
    wait_isolation(api, operator, namespace, ("True", "NetworkPolicyApplied", True))
    template = (api.get(kv_path(namespace, "web")) or {})["spec"]["template"]["metadata"]["labels"]
    assert "owner-team" not in template

    # Another field manager narrows the selector: the rendered fields are all still there.
    api.merge(
        netpol_path(namespace, "web-netpol"), {"spec": {"podSelector": {"matchLabels": {"owner-team": "a"}}}}
    )
    policy = api.get(netpol_path(namespace, "web-netpol")) or {}
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "uds.dev/vm": "web",
        "kubevirt.io": "virt-launcher",
        "owner-team": "a",
    }
    status = wait_isolation(api, operator, namespace, ("False", "NetworkPolicySelectsNoPod", False))
    assert "virt-launcher" in condition(status, "NetworkIsolated")["message"]

    # An expression that excludes the VM is caught the same way.
    api.merge(
        netpol_path(namespace, "web-netpol"),
        {
            "spec": {
                "podSelector": {
                    "matchLabels": {"owner-team": None},
                    "matchExpressions": [{"key": "uds.dev/vm", "operator": "NotIn", "values": ["web"]}],
                }
            }
        },
    )
    wait_isolation(api, operator, namespace, ("False", "NetworkPolicySelectsNoPod", False))

    # Put back as rendered: isolation (and zero trust) are reported again.
    api.merge(netpol_path(namespace, "web-netpol"), {"spec": {"podSelector": {"matchExpressions": None}}})
    wait_isolation(api, operator, namespace, ("True", "NetworkPolicyApplied", True))
