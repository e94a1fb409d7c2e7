"""SC-7 proven by packets: the NetworkPolicies the operator renders, enforced by the node's policy engine
(kube-router), against pods that carry the labels a VM's virt-launcher pod carries.

The policies come from the operator's own pure renderers (`render_children`,
`render_verifier_network_policy`), the same functions the controller calls; their ownerReferences are
dropped because no UDSVirtualMachine owns them here (the garbage collector would remove them). The "VM" is
a busybox pod labelled with the rendered VirtualMachine's pod-template labels, so every network option can
be shown without KubeVirt; test_kubevirt_launcher_packets shows the same on the launcher pod virt-controller
makes.

Every "denied" is first awaited (the engine applies a policy within seconds) and then held against an
"allowed" from the same pod, so a policy engine that blocked everything would fail these tests too.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.node.node_cluster import NodeHandle, wait_until
from tools.node import node_configs as cfg
from tools.node import probes
from uds_vm_operator.api import parse_vm_spec
from uds_vm_operator.render import ClusterFacts, Owner, render_children
from uds_vm_operator.render.verifier import render_verifier_network_policy

# Indifferent to CDI (tests/node/lanes.py): pods and NetworkPolicies only: no DataVolume, no virt-api.
pytestmark = pytest.mark.cdi_indifferent

BASE: dict[str, Any] = {"source": {"upload": {}}, "disk": {"virtualSize": "1Gi"}}


def rendered(namespace: str, network: dict[str, Any], name: str = "web") -> dict[str, dict[str, Any]]:
    """The operator's children for a VM with this network spec, by kind."""
    owner = Owner(name, namespace, "00000000-0000-0000-0000-000000000000")
    children = render_children(owner, parse_vm_spec({**BASE, "network": network}), ClusterFacts())
    by_kind: dict[str, dict[str, Any]] = {}
    for child in children:
        child["metadata"].pop("ownerReferences", None)
        by_kind.setdefault(child["kind"], child)
    return by_kind


def launcher_labels(children: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The labels a virt-launcher pod carries: the VM template's, plus those virt-controller adds itself."""
    vm = children["VirtualMachine"]
    name = vm["metadata"]["name"]
    template: dict[str, str] = vm["spec"]["template"]["metadata"]["labels"]
    return {
        **template,
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/domain": name,
        "vm.kubevirt.io/name": name,
    }


def apply_policy(node: NodeHandle, policy: dict[str, Any]) -> None:
    namespace = policy["metadata"]["namespace"]
    node.create(policy, f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies")


def blocked(pid: int, host: str, port: int) -> bool:
    """Every target port here is listening and was reached before the policy, so a block is the policy's."""
    return probes.tcp_blocked(pid, host, port)


def eventually_blocked(what: str, pid: int, host: str, port: int) -> None:
    wait_until(f"{what}: {host}:{port} blocked", lambda: blocked(pid, host, port), 45, 0.5)


def dns_works(pid: int, protocol: str = "udp") -> bool:
    answer = probes.dns(pid, "kube-dns.kube-system.svc.cluster.local", cfg.CLUSTER_DNS_IP, protocol)
    return answer.get("addresses") == [cfg.CLUSTER_DNS_IP]


def test_default_vm_policy_denies_ingress_and_allows_only_dns_out(node: NodeHandle, ns: str) -> None:
    children = rendered(ns, {})
    vm = node.server_pod(ns, "virt-launcher-web", launcher_labels(children))
    neighbour = node.server_pod(ns, "neighbour", {"app": "neighbour"})
    other_ns = node.namespace("outsider")
    try:
        outsider = node.client_pod(other_ns, "outsider", {"app": "outsider"})
        outsider_pid, vm_pid = node.container_pid(outsider), node.container_pid(vm)
        vm_ip, neighbour_ip = vm["status"]["podIP"], neighbour["status"]["podIP"]
        # Before the policy: open both ways (the engine is not blocking everything by itself).
        assert probes.tcp(outsider_pid, vm_ip, 8080) == "connected"
        assert probes.tcp(vm_pid, neighbour_ip, 8080) == "connected"

        apply_policy(node, children["NetworkPolicy"])
        eventually_blocked("ingress from another namespace", outsider_pid, vm_ip, 8080)
        same_ns = node.container_pid(node.client_pod(ns, "same-ns-client", {"app": "client"}))
        assert blocked(same_ns, vm_ip, 8080), "ingress from the VM's own namespace too"
        eventually_blocked("egress to a neighbour pod", vm_pid, neighbour_ip, 8080)
        assert dns_works(vm_pid, "udp") and dns_works(vm_pid, "tcp"), (
            "DNS to kube-dns stays open (UDP and TCP)"
        )
        assert blocked(vm_pid, "10.0.0.1", 443), "not even the API server"
        assert probes.tcp(outsider_pid, neighbour_ip, 8080) == "connected", "other pods are not affected"
    finally:
        node.delete_namespace(other_ns)


def test_allow_rules_open_exactly_what_they_name(node: NodeHandle, ns: str) -> None:
    network = {
        "allow": [
            {"direction": "Egress", "podSelector": {"matchLabels": {"app": "db"}}, "ports": [{"port": 5432}]},
            {
                "direction": "Ingress",
                "podSelector": {"matchLabels": {"app": "admin"}},
                "ports": [{"port": 2222}],
            },
        ]
    }
    children = rendered(ns, network)
    vm = node.server_pod(ns, "virt-launcher-web", launcher_labels(children), (2222, 8080))
    db = node.server_pod(ns, "db", {"app": "db"}, (5432, 8080))
    admin = node.container_pid(node.client_pod(ns, "admin", {"app": "admin"}))
    stranger = node.container_pid(node.client_pod(ns, "stranger", {"app": "stranger"}))
    vm_pid, vm_ip, db_ip = node.container_pid(vm), vm["status"]["podIP"], db["status"]["podIP"]
    apply_policy(node, children["NetworkPolicy"])
    eventually_blocked("ingress from a stranger", stranger, vm_ip, 2222)
    assert probes.tcp(admin, vm_ip, 2222) == "connected", "the allowed peer on the allowed port"
    assert blocked(admin, vm_ip, 8080), "the allowed peer on another port"
    eventually_blocked("egress to the db on another port", vm_pid, db_ip, 8080)
    assert probes.tcp(vm_pid, db_ip, 5432) == "connected", "egress to the allowed peer and port"


def test_vpn_egress_reaches_only_the_gateway_and_nothing_once_it_is_gone(node: NodeHandle, ns: str) -> None:
    gateway_ns = node.namespace("vpn", {"role": "vpn"})
    try:
        network = {
            "egress": "vpn",
            "vpnGateway": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": gateway_ns}},
                "podSelector": {"matchLabels": {"app": "wg"}},
            },
        }
        children = rendered(ns, network)
        gateway = node.server_pod(gateway_ns, "wg", {"app": "wg"})
        decoy = node.server_pod(gateway_ns, "not-wg", {"app": "web"})
        vm = node.client_pod(ns, "virt-launcher-web", launcher_labels(children))
        vm_pid = node.container_pid(vm)
        apply_policy(node, children["NetworkPolicy"])
        eventually_blocked(
            "egress to a non-gateway pod in the gateway namespace", vm_pid, decoy["status"]["podIP"], 8080
        )
        assert probes.tcp(vm_pid, gateway["status"]["podIP"], 8080) == "connected", "the gateway is reachable"
        # Kill switch: the gateway pod goes away; its replacement without the label gets nothing either.
        node.api.delete(f"/api/v1/namespaces/{gateway_ns}/pods/wg")
        wait_until(
            "gateway pod gone", lambda: node.api.get(f"/api/v1/namespaces/{gateway_ns}/pods/wg") is None, 60
        )
        impostor = node.server_pod(gateway_ns, "impostor", {"app": "impostor"})
        assert blocked(vm_pid, impostor["status"]["podIP"], 8080)
        assert blocked(vm_pid, decoy["status"]["podIP"], 8080), "nothing leaves without a gateway"
        assert dns_works(vm_pid), "DNS only"
    finally:
        node.delete_namespace(gateway_ns)


def test_exposed_ports_are_reachable_through_the_service_and_nothing_else(node: NodeHandle, ns: str) -> None:
    network = {"expose": [{"port": 8080, "protocol": "TCP"}]}
    children = rendered(ns, network)
    vm = node.server_pod(ns, "virt-launcher-web", launcher_labels(children), (8080, 9090))
    service = children["Service"]
    created = node.create(service, f"/api/v1/namespaces/{ns}/services")
    cluster_ip = created["spec"]["clusterIP"]
    apply_policy(node, children["NetworkPolicy"])
    client = node.container_pid(node.client_pod(ns, "client", {"app": "client"}))
    other_ns = node.namespace("elsewhere")
    try:
        elsewhere = node.container_pid(node.client_pod(other_ns, "far", {"app": "far"}))
        eventually_blocked("a port that is not exposed", client, vm["status"]["podIP"], 9090)
        port = created["spec"]["ports"][0]["port"]
        assert wait_until(
            "the exposed port through the Service",
            lambda: probes.tcp(client, cluster_ip, port) == "connected",
            45,
        )
        assert blocked(elsewhere, cluster_ip, port), "non-HTTP exposure is for the VM's namespace"
    finally:
        node.delete_namespace(other_ns)


def test_the_verifier_pod_reaches_nothing_and_nothing_reaches_it(node: NodeHandle, ns: str) -> None:
    owner = Owner("web", ns, "00000000-0000-0000-0000-000000000000")
    policy = render_verifier_network_policy(owner)
    policy["metadata"].pop("ownerReferences", None)
    labels = policy["spec"]["podSelector"]["matchLabels"]
    verifier = node.server_pod(ns, "web-verify", labels)
    target = node.server_pod(ns, "target", {"app": "target"})
    client = node.container_pid(node.client_pod(ns, "client", {"app": "client"}))
    verifier_pid = node.container_pid(verifier)
    assert dns_works(verifier_pid), "before the policy the pod resolves names"
    apply_policy(node, policy)
    eventually_blocked("egress from the verifier", verifier_pid, target["status"]["podIP"], 8080)
    answer = probes.dns(verifier_pid, "kube-dns.kube-system.svc.cluster.local", cfg.CLUSTER_DNS_IP)
    assert answer["outcome"] != "answered", answer
    assert blocked(verifier_pid, "10.0.0.1", 443), "not the API server either"
    assert blocked(client, verifier["status"]["podIP"], 8080), "and no ingress"
    assert probes.tcp(client, target["status"]["podIP"], 8080) == "connected", (
        "the rest of the namespace is open"
    )
