"""Platform networking on the real API server: exposure (Service + Gateway API HTTPRoute) and the vpn egress
class with its kill switch, asserted on the objects as the API server stored them (Strict field validation
on every write, by the operator and by the test)."""

from __future__ import annotations

from typing import Any

from tests.integration.operator_fixtures import (
    api,
    condition,
    netpol_path,
    operator,
    status_of,
    udsvm,
    vm_path,
    wait_phase,
)
from tests.integration.operator_harness import Api, OperatorProcess
from tests.kube_helpers import wait_for

__all__ = ["api", "operator"]  # fixtures used by name

GATEWAY_NS = "istio-tenant-gateway"
NS_LABEL = "kubernetes.io/metadata.name"


def service_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/services/{name}"


def route_path(namespace: str, name: str) -> str:
    return f"/apis/gateway.networking.k8s.io/v1/namespaces/{namespace}/httproutes/{name}"


def owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(r["uid"] == uid and r.get("controller") for r in obj["metadata"].get("ownerReferences") or [])


def test_expose_creates_owned_service_and_httproute_and_opens_exactly_those_ports(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    expose = [
        {
            "port": 443,
            "http": {"hostname": "wiki.uds.dev", "gateway": {"name": "tenant", "namespace": GATEWAY_NS}},
        },
        {"port": 5432, "name": "pg"},
    ]
    created = api.apply(udsvm("web", namespace, network={"expose": expose}), vm_path(namespace, "web"))
    uid = created["metadata"]["uid"]
    wait_phase(api, operator, namespace, "web", "Pending")

    https = api.get(service_path(namespace, "web-443"))
    postgres = api.get(service_path(namespace, "web-5432"))
    route = api.get(route_path(namespace, "web-443"))
    assert https is not None and postgres is not None and route is not None, operator.logs()
    for child in (https, postgres, route):
        assert owned_by(child, uid)
        assert child["metadata"]["labels"]["uds.dev/vm"] == "web"
    assert https["spec"]["selector"] == {"uds.dev/vm": "web", "kubevirt.io": "virt-launcher"}
    assert [(p["port"], p["targetPort"], p["protocol"]) for p in https["spec"]["ports"]] == [
        (443, 443, "TCP")
    ]
    assert postgres["spec"]["ports"][0]["name"] == "pg"
    assert api.get(route_path(namespace, "web-5432")) is None  # no HTTPRoute for a non-HTTP port

    assert route["spec"]["hostnames"] == ["wiki.uds.dev"]
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "tenant", "namespace": GATEWAY_NS}
    ]
    backends = route["spec"]["rules"][0]["backendRefs"]
    assert [(b["kind"], b["name"], b["port"]) for b in backends] == [("Service", "web-443", 443)]

    policy = api.get(netpol_path(namespace, "web-netpol"))
    assert policy is not None
    ingress = policy["spec"]["ingress"]
    assert ingress == [
        {
            "from": [{"namespaceSelector": {"matchLabels": {NS_LABEL: GATEWAY_NS}}}],
            "ports": [{"protocol": "TCP", "port": 443}],
        },
        {"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 5432}]},
    ]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]

    # Removing the HTTP exposure closes it everywhere: Service and HTTPRoute deleted, port closed.
    api.apply(udsvm("web", namespace, network={"expose": expose[1:]}), vm_path(namespace, "web"))
    wait_for(lambda: api.get(route_path(namespace, "web-443")) is None, 30, 0.3, what="HTTPRoute pruned")
    wait_for(lambda: api.get(service_path(namespace, "web-443")) is None, 30, 0.3, what="Service pruned")
    assert api.get(service_path(namespace, "web-5432")) is not None
    policy = api.get(netpol_path(namespace, "web-netpol"))
    assert policy is not None and [r["ports"][0]["port"] for r in policy["spec"]["ingress"]] == [5432]


def test_switching_to_uds_package_mode_removes_the_networkpolicy_and_reports_a_missing_package_crd(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    assert api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/packages.uds.dev") is None
    api.apply(udsvm("sw", namespace), vm_path(namespace, "sw"))
    wait_phase(api, operator, namespace, "sw", "Pending")
    assert api.get(netpol_path(namespace, "sw-netpol")) is not None

    api.apply(udsvm("sw", namespace, network={"mode": "uds-package"}), vm_path(namespace, "sw"))
    wait_for(
        lambda: api.get(netpol_path(namespace, "sw-netpol")) is None, 30, 0.3, what="NetworkPolicy pruned"
    )

    def reported() -> dict[str, Any] | None:
        status = status_of(api, namespace, "sw")
        found = [c for c in status.get("conditions") or [] if c["type"] == "UDSPackageSynced"]
        return found[0] if found else None

    synced = wait_for(reported, 30, 0.3, what="UDSPackageSynced reported")
    assert (synced["status"], synced["reason"]) == ("False", "PackageCRDMissing")
    assert "network.mode: networkpolicy" in synced["message"]
    status = status_of(api, namespace, "sw")
    assert condition(status, "NetworkIsolated")["status"] == "False"
    assert status["zeroTrust"] is False  # nothing isolates the VM now, and status says so


def test_vpn_egress_goes_only_to_the_gateway_pods_and_dns_never_to_an_ip_block(
    api: Api, operator: OperatorProcess, namespace: str
) -> None:
    network = {
        "egress": "vpn",
        "vpnGateway": {
            "namespaceSelector": {"matchLabels": {NS_LABEL: "vpn"}},
            "podSelector": {"matchLabels": {"app": "wireguard-gateway"}},
        },
    }
    api.apply(udsvm("vpnvm", namespace, network=network), vm_path(namespace, "vpnvm"))
    status = wait_phase(api, operator, namespace, "vpnvm", "Pending")
    assert status["zeroTrust"] is True

    policy = api.get(netpol_path(namespace, "vpnvm-netpol"))
    assert policy is not None
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {"uds.dev/vm": "vpnvm", "kubevirt.io": "virt-launcher"}}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in spec  # nothing exposed, nothing allowed: all ingress denied
    assert spec["egress"] == [
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {NS_LABEL: "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {NS_LABEL: "vpn"}},
                    "podSelector": {"matchLabels": {"app": "wireguard-gateway"}},
                }
            ]
        },
    ]
    # Kill switch: every egress peer is a pod selector, so without gateway pods nothing but DNS is reachable.
    assert "ipBlock" not in str(policy)
    for rule in spec["egress"]:
        for peer in rule["to"]:
            assert set(peer) == {"namespaceSelector", "podSelector"} and peer["podSelector"]["matchLabels"]
