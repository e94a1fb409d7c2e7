"""uds-package mode: per-VM rules merged into the namespace's UDS Package without clobbering anyone else's."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from uds_vm_operator.api import SpecError, parse_vm_spec
from uds_vm_operator.render import (
    ClusterFacts,
    Owner,
    merge_package,
    remove_vm_from_package,
    render_children,
    vm_package_rules,
)
from uds_vm_operator.render.udspackage import (
    mesh_mode,
    package_supports_kubevirt,
    with_kubevirt_enabled,
    with_mesh_annotations,
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


REAL_CRD = Path(__file__).resolve().parents[1] / "integration" / "crds" / "uds-package-v1alpha1.yaml"


def _unknown_fields(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    """Paths in ``value`` that the structural schema does not declare (what Strict validation refuses)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        if "additionalProperties" in schema:
            return [
                p
                for k, v in value.items()
                for p in _unknown_fields(v, schema["additionalProperties"], f"{where}.{k}")
            ]
        props = schema.get("properties") or {}
        found = []
        for key, item in value.items():
            if key not in props:
                found.append(f"{where}.{key}")
            else:
                found += _unknown_fields(item, props[key], f"{where}.{key}")
        return found
    if isinstance(value, list):
        return [
            p
            for i, v in enumerate(value)
            for p in _unknown_fields(v, schema.get("items") or {}, f"{where}[{i}]")
        ]
    return []


def _enum_violations(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}={value!r}"]
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        return [
            p for k, v in value.items() if k in props for p in _enum_violations(v, props[k], f"{where}.{k}")
        ]
    if isinstance(value, list):
        return [
            p
            for i, v in enumerate(value)
            for p in _enum_violations(v, schema.get("items") or {}, f"{where}[{i}]")
        ]
    return []


def test_every_written_field_and_value_is_in_uds_core_v1_11_package_schema() -> None:
    crd = yaml.safe_load(REAL_CRD.read_text())
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    result = rules(
        "a",
        {
            "egress": "internet",
            "allow": [
                {"direction": "Ingress", "cidr": "10.0.0.0/8", "ports": [{"port": 22}]},
                {
                    "direction": "Egress",
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "db"}},
                    "podSelector": {"matchLabels": {"app": "pg"}},
                },
            ],
            "expose": [{"port": 443, "http": HTTP}, {"port": 9100, "name": "metrics"}, {"port": 8080}],
        },
    )
    package = merge_package(None, "a", result, namespace="apps")
    assert _unknown_fields(package["spec"], spec_schema, "spec") == []
    assert _enum_violations(package["spec"], spec_schema, "spec") == []
    # the check itself bites: the field the old renderer wrote is not in the schema
    bad = {"network": {"allow": [{"direction": "Ingress", "port": 53, "protocol": "UDP"}]}}
    assert _unknown_fields(bad, spec_schema, "spec") == ["spec.network.allow[0].protocol"]
    required = spec_schema["properties"]["network"]["properties"]["expose"]["items"]["anyOf"]
    for entry in package["spec"]["network"]["expose"]:
        assert any(set(option["required"]) <= set(entry) for option in required), entry


@pytest.mark.parametrize(
    "network",
    [
        {
            "allow": [
                {"direction": "Ingress", "cidr": "10.0.0.0/8", "ports": [{"port": 53, "protocol": "UDP"}]}
            ]
        },
        {"expose": [{"port": 5060, "protocol": "SCTP"}]},
    ],
)
def test_a_non_tcp_port_is_a_spec_error_not_a_wider_tcp_rule(network: dict[str, Any]) -> None:
    with pytest.raises(SpecError, match="TCP ports only"):
        rules("a", network)


def test_sidecar_mode_annotates_launcher_and_cdi_workers_and_ambient_mode_nothing() -> None:
    children = render_children(Owner("a", "apps", "u"), spec({"expose": [{"port": 22}]}), ClusterFacts())
    assert mesh_mode({"spec": {"network": {"serviceMesh": {"mode": "sidecar"}}}}) == "sidecar"
    assert mesh_mode({"spec": {"network": {}}}) == "ambient" == mesh_mode(None)
    assert with_mesh_annotations(children, "ambient") == children
    annotated = with_mesh_annotations(children, "sidecar")
    assert children != annotated
    for child in annotated:
        if child["kind"] == "VirtualMachine":
            launcher = child["spec"]["template"]["metadata"]["annotations"]
            assert launcher["status.sidecar.istio.io/port"] == "0"
            assert launcher["traffic.sidecar.istio.io/kubevirtInterfaces"] == "k6t-eth0"
            assert "sidecar.istio.io/inject" not in launcher  # the launcher keeps its sidecar
        elif child["kind"] == "DataVolume":
            assert child["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        else:  # Services, Secrets: untouched
            assert child == next(
                c
                for c in children
                if c["metadata"]["name"] == child["metadata"]["name"] and c["kind"] == child["kind"]
            )
    assert any(c["kind"] == "DataVolume" for c in annotated)


def test_kubevirt_enabled_only_where_the_package_crd_has_it() -> None:
    crd = yaml.safe_load(REAL_CRD.read_text())
    assert not package_supports_kubevirt(crd), "uds-core v1.11.0 has no spec.kubevirt"
    poc = copy.deepcopy(crd)
    props = poc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    props["kubevirt"] = {"type": "object", "properties": {"enabled": {"type": "boolean"}}}
    assert package_supports_kubevirt(poc)
    package = merge_package(None, "a", rules("a", {"egress": "internet"}), namespace="apps")
    assert with_kubevirt_enabled(package, False) == package
    assert with_kubevirt_enabled(package, True)["spec"]["kubevirt"] == {"enabled": True}
    assert "kubevirt" not in package["spec"], "input not modified"
