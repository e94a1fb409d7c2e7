"""NetworkPolicy: default deny both ways, egress classes, explicit allows, exposed ports, VPN kill switch."""

from __future__ import annotations

from typing import Any

import pytest

from uds_vm_operator.api import parse_vm_spec
from uds_vm_operator.render import Owner
from uds_vm_operator.render.networkpolicy import DNS_PEER, DNS_PORTS, render_network_policy

OWNER = Owner("web", "apps", "uid-1")
BASE: dict[str, Any] = {"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}}
VPN = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "vpn"}},
    "podSelector": {"matchLabels": {"app": "wg"}},
}


def policy(network: dict[str, Any] | None = None) -> dict[str, Any]:
    raw = {**BASE, **({"network": network} if network is not None else {})}
    result: dict[str, Any] = render_network_policy(OWNER, parse_vm_spec(raw))
    return result


def all_peers(rules: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [peer for rule in rules for peer in rule.get(key, [])]


def test_selects_the_vm_and_governs_both_directions() -> None:
    manifest = policy()
    assert manifest["metadata"]["name"] == "web-netpol"
    # Not CDI's worker pods: they carry the DataVolume's uds.dev/vm label but must reach their source.
    assert manifest["spec"]["podSelector"] == {
        "matchLabels": {"uds.dev/vm": "web", "kubevirt.io": "virt-launcher"}
    }
    assert manifest["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_default_is_dns_only_egress_and_no_ingress() -> None:
    spec = policy()["spec"]
    assert spec["ingress"] == [], "an explicit empty list: all ingress denied, and the list is ours"
    assert spec["egress"] == [{"to": [DNS_PEER], "ports": DNS_PORTS}]
    assert DNS_PEER["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    assert DNS_PEER["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert {(p["protocol"], p["port"]) for p in DNS_PORTS} == {("UDP", 53), ("TCP", 53)}


def test_none_means_nothing_leaves() -> None:
    assert policy({"egress": "none"})["spec"]["egress"] == []


def test_internet_excludes_private_and_metadata_ranges() -> None:
    egress = policy({"egress": "internet"})["spec"]["egress"]
    blocks = {
        peer["ipBlock"]["cidr"]: peer["ipBlock"]["except"]
        for peer in all_peers(egress, "to")
        if "ipBlock" in peer
    }
    assert set(blocks["0.0.0.0/0"]) == {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}
    assert "fe80::/10" in blocks["::/0"]
    assert egress[0] == {"to": [DNS_PEER], "ports": DNS_PORTS}


def test_vpn_egress_goes_only_to_gateway_pods_never_an_ip_block() -> None:
    egress = policy({"egress": "vpn", "vpnGateway": VPN})["spec"]["egress"]
    peers = all_peers(egress, "to")
    assert all("ipBlock" not in peer for peer in peers), "an ipBlock would survive the gateway's death"
    assert {"namespaceSelector": VPN["namespaceSelector"], "podSelector": VPN["podSelector"]} in peers
    assert len(egress) == 2  # DNS + gateway: nothing else leaves, so no gateway pods means no egress


def test_vpn_gateway_without_namespace_selector_stays_in_the_namespace() -> None:
    egress = policy({"egress": "vpn", "vpnGateway": {"podSelector": {"matchLabels": {"app": "wg"}}}})["spec"][
        "egress"
    ]
    assert egress[1] == {"to": [{"podSelector": {"matchLabels": {"app": "wg"}}}]}


def test_allow_rules_become_ingress_and_egress_rules() -> None:
    network = {
        "allow": [
            {"direction": "Ingress", "cidr": "10.1.0.0/16", "ports": [{"port": 22}]},
            {
                "direction": "Egress",
                "namespaceSelector": {"matchLabels": {"team": "db"}},
                "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["pg"]}]},
                "ports": [{"port": 5432, "protocol": "TCP"}],
            },
        ]
    }
    spec = policy(network)["spec"]
    assert spec["ingress"] == [
        {"from": [{"ipBlock": {"cidr": "10.1.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 22}]}
    ]
    assert spec["egress"][-1] == {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"team": "db"}},
                "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["pg"]}]},
            }
        ],
        "ports": [{"protocol": "TCP", "port": 5432}],
    }


def test_explicit_egress_allows_apply_even_with_egress_none() -> None:
    egress = policy({"egress": "none", "allow": [{"direction": "Egress", "cidr": "10.9.0.5/32"}]})["spec"][
        "egress"
    ]
    assert egress == [{"to": [{"ipBlock": {"cidr": "10.9.0.5/32"}}]}]


@pytest.mark.parametrize(
    ("item", "peer"),
    [
        (
            {
                "port": 443,
                "http": {
                    "hostname": "vm.example.com",
                    "gateway": {"name": "tenant", "namespace": "istio-gw"},
                },
            },
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "istio-gw"}}},
        ),
        ({"port": 5432}, {"podSelector": {}}),
    ],
)
def test_exposed_ports_open_exactly_that_port(item: dict[str, Any], peer: dict[str, Any]) -> None:
    ingress = policy({"expose": [item]})["spec"]["ingress"]
    assert ingress == [{"from": [peer], "ports": [{"protocol": "TCP", "port": item["port"]}]}]
