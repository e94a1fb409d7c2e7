"""uds-package mode: per-VM rules merged into the namespace's UDS Package without clobbering anyone else's."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from uds_vm_operator.api import SpecError, parse_vm_spec
from uds_vm_operator.render import (
    ClusterFacts,
    Owner,
    merge_package,
    remove_vm_from_package,
    render_children,
    vm_package_rules,
)

HTTP = {"hostname": "app.uds.dev", "gateway": {"name": "tenant", "namespace": "istio-tenant-gateway"}}
FOREIGN_ALLOW = {
    "direction": "Egress",
    "selector": {"app": "api"},
    "remoteGenerated": "KubeAPI",
    "description": "team rule",
}


def spec(network: dict[str, Any]) -> Any:
    return parse_vm_spec(
        {
            "source": {"upload": {}},
            "disk": {"virtualSize": "1Gi"},
            "network": {"mode": "uds-package", **network},
        }
    )


def rules(name: str, network: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return vm_package_rules(name, spec(network))


def test_rules_are_tagged_per_vm() -> None:
    result = rules(
        "a",
        {
            "egress": "internet",
            "allow": [
                {"direction": "Ingress", "cidr": "10.0.0.0/8", "ports": [{"port": 22}, {"port": 2222}]}
            ],
            "expose": [{"port": 443, "http": HTTP}, {"port": 9100, "name": "metrics"}],
        },
    )
    every = result["allow"] + result["expose"] + result["monitor"]
    assert all(entry["description"].startswith("uds-vm:a:") for entry in every)
    assert {
        "direction": "Egress",
        "selector": {"uds.dev/vm": "a"},
        "remoteGenerated": "Anywhere",
    }.items() <= result["allow"][0].items()
    assert [entry.get("port") for entry in result["allow"] if entry.get("remoteCidr")] == [22, 2222]
    (expose,) = result["expose"]
    assert (expose["gateway"], expose["host"], expose["service"], expose["port"]) == (
        "tenant",
        "app",
        "a-443",
        443,
    )
    (monitor,) = result["monitor"]
    assert (monitor["portName"], monitor["targetPort"]) == ("metrics", 9100)


def test_every_allow_entry_names_a_remote() -> None:
    result = rules(
        "a", {"allow": [{"direction": "Egress", "ports": [{"port": 443}]}], "expose": [{"port": 22}]}
    )
    remotes = ("remoteGenerated", "remoteNamespace", "remoteSelector", "remoteCidr", "remoteHost")
    assert all(any(key in entry for key in remotes) for entry in result["allow"])


def test_vpn_egress_names_the_gateway() -> None:
    gateway = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "vpn"}},
        "podSelector": {"matchLabels": {"app": "wg"}},
    }
    (entry,) = rules("a", {"egress": "vpn", "vpnGateway": gateway})["allow"]
    assert (entry["remoteNamespace"], entry["remoteSelector"]) == ("vpn", {"app": "wg"})


def test_namespace_selected_by_other_labels_is_a_clear_error() -> None:
    with pytest.raises(SpecError, match="namespace is named, not selected"):
        rules("a", {"allow": [{"direction": "Ingress", "namespaceSelector": {"matchLabels": {"team": "x"}}}]})


def test_two_vms_union_and_deleting_one_removes_only_its_rules() -> None:
    existing = {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "Package",
        "metadata": {"name": "apps", "namespace": "apps"},
        "spec": {"network": {"allow": [FOREIGN_ALLOW]}},
    }
    snapshot = copy.deepcopy(existing)
    a_rules = rules("a", {"egress": "internet"})
    b_rules = rules("b", {"expose": [{"port": 443, "http": HTTP}]})
    merged = merge_package(merge_package(existing, "a", a_rules), "b", b_rules)
    assert existing == snapshot, "inputs are never modified"
    allow = merged["spec"]["network"]["allow"]
    assert allow[0] == FOREIGN_ALLOW
    assert [e["description"] for e in allow[1:]] == ["uds-vm:a:egress-internet"]
    assert [e["description"] for e in merged["spec"]["network"]["expose"]] == ["uds-vm:b:expose-443"]
    without_a = remove_vm_from_package(merged, "a")
    assert without_a["spec"]["network"]["allow"] == [FOREIGN_ALLOW]
    assert without_a["spec"]["network"]["expose"] == merged["spec"]["network"]["expose"]


def test_merge_is_idempotent() -> None:
    a_rules = rules("a", {"egress": "internet", "expose": [{"port": 80}]})
    once = merge_package(None, "a", a_rules, namespace="apps")
    assert merge_package(once, "a", a_rules) == once
    assert once["metadata"] == {"name": "apps", "namespace": "apps"}


def test_prefix_does_not_match_a_longer_vm_name() -> None:
    merged = merge_package(None, "ab", rules("ab", {"egress": "internet"}), namespace="apps")
    assert remove_vm_from_package(merged, "a") == merged


def test_new_package_needs_a_namespace() -> None:
    with pytest.raises(SpecError, match="namespace"):
        merge_package(None, "a", {})


def test_uds_package_mode_renders_no_network_policy_and_no_http_route() -> None:
    children = render_children(
        Owner("a", "apps", "u"), spec({"expose": [{"port": 443, "http": HTTP}]}), ClusterFacts()
    )
    kinds = [child["kind"] for child in children]
    assert "NetworkPolicy" not in kinds and "HTTPRoute" not in kinds
    assert "Service" in kinds
