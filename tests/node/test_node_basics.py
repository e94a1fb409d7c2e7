"""The node is a real node: pods are scheduled, run from the loopback registry, get bridge addresses the host
reaches, Services work through kube-proxy, names resolve through CoreDNS, and a pod has no route off the
machine."""

from __future__ import annotations

import pytest

from tests.node.node_cluster import NodeHandle, wait_until
from tools.node import node_configs as cfg
from tools.node import probes

# Indifferent to CDI (tests/node/lanes.py): pods and Services only: no DataVolume, no virt-api.
pytestmark = pytest.mark.cdi_indifferent


def test_a_pod_is_scheduled_pulled_from_the_local_registry_and_reachable(node: NodeHandle, ns: str) -> None:
    pod = node.server_pod(ns, "web", {"app": "web"})
    assert pod["spec"]["nodeName"] == cfg.NODE_NAME, "kube-scheduler placed it (the test never sets nodeName)"
    events = node.api.items(f"/api/v1/namespaces/{ns}/events")
    assert any(
        (e.get("reason") == "Scheduled" and e.get("source", {}).get("component") == "default-scheduler")
        or e.get("reportingComponent") == "default-scheduler"
        for e in events
    ), events
    status = pod["status"]["containerStatuses"][0]
    assert status["imageID"].startswith(f"{node.registry}/uds-test/busybox@sha256:"), status["imageID"]
    ip = pod["status"]["podIP"]
    assert ip.startswith("10.244.0."), ip
    client = node.client_pod(ns, "client", {"app": "client"})
    assert probes.tcp(node.container_pid(client), ip, 8080) == "connected"
    assert probes.tcp(node.container_pid(client), ip, 8081) == "refused", "a closed port is refused, not open"


def test_a_pod_has_no_route_off_the_machine(node: NodeHandle, ns: str) -> None:
    pid = node.container_pid(node.client_pod(ns, "lonely", {"app": "lonely"}))
    table = probes.routes(pid)
    assert "default" not in table, table
    assert cfg.SERVICE_CIDR in table, "Services are routed via the node"
    # Route lookups only: no packet is sent to any address outside the project's own.
    for outside in ("1.1.1.1", "192.168.1.1", "172.16.0.1"):
        assert "unreachable" in probes.route_to(pid, outside).lower(), outside


def test_services_work_through_kube_proxy(node: NodeHandle, ns: str) -> None:
    node.server_pod(ns, "backend", {"app": "backend"})
    service = node.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "backend", "namespace": ns},
            "spec": {"selector": {"app": "backend"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        f"/api/v1/namespaces/{ns}/services",
    )
    cluster_ip = service["spec"]["clusterIP"]
    pid = node.container_pid(node.client_pod(ns, "caller", {"app": "caller"}))
    assert wait_until("the Service answers", lambda: probes.tcp(pid, cluster_ip, 80) == "connected", 60)
    # The in-cluster API endpoint works too: the `kubernetes` Service reaches the API server on the node.
    assert probes.tcp(pid, "10.0.0.1", 443) == "connected"


def test_names_resolve_through_coredns_and_nothing_is_forwarded(node: NodeHandle, ns: str) -> None:
    pid = node.container_pid(node.client_pod(ns, "resolver", {"app": "resolver"}))
    for protocol in ("udp", "tcp"):
        answer = probes.dns(pid, "kube-dns.kube-system.svc.cluster.local", cfg.CLUSTER_DNS_IP, protocol)
        assert answer == {"outcome": "answered", "rcode": 0, "addresses": [cfg.CLUSTER_DNS_IP]}, answer
        api = probes.dns(pid, "kubernetes.default.svc.cluster.local", cfg.CLUSTER_DNS_IP, protocol)
        assert api["addresses"] == ["10.0.0.1"], api
    outside = probes.dns(pid, "example.com", cfg.CLUSTER_DNS_IP)
    assert outside["outcome"] == "answered" and outside["rcode"] == 3, "NXDOMAIN: CoreDNS forwards nothing"
