"""The real node's configuration keeps a shared test machine safe: pods have no route off the machine,
NodePorts live only on the node's own address, DNS forwards nothing, and containerd never meets the host's."""

from __future__ import annotations

from pathlib import Path

from tools.node import node_configs as cfg

PATHS = cfg.NodePaths(state_dir=Path("/tmp/state"), run_dir=Path("/run/udsvm-x"))


def test_pods_get_no_default_route_and_no_masquerade() -> None:
    (bridge,) = cfg.cni_conflist(PATHS)["plugins"]
    assert bridge["isDefaultGateway"] is False and bridge["ipMasq"] is False
    assert bridge["ipam"]["routes"] == [{"dst": cfg.SERVICE_CIDR}], "only Services are routed"
    assert bridge["ipam"]["ranges"][0][0]["gateway"] == cfg.NODE_ADDRESS
    assert bridge["ipam"]["dataDir"].startswith("/tmp/state/"), "IPAM state stays in the node's folder"


def test_node_ports_and_the_kubelet_listen_only_on_the_node_address() -> None:
    proxy = cfg.kube_proxy_config(Path("/k"), 1, 2)
    assert proxy["nodePortAddresses"] == [f"{cfg.NODE_ADDRESS}/32"]
    assert proxy["iptables"]["localhostNodePorts"] is False
    assert proxy["healthzBindAddress"].startswith("127.0.0.1:") and proxy["metricsBindAddress"].startswith(
        "127.0.0.1:"
    )
    kubelet = cfg.kubelet_config(PATHS, Path("/ca.crt"), 3)
    assert kubelet["address"] == cfg.NODE_ADDRESS and kubelet["readOnlyPort"] == 0
    assert kubelet["authentication"]["anonymous"] == {"enabled": False}
    assert kubelet["clusterDNS"] == [cfg.CLUSTER_DNS_IP]


def test_coredns_answers_the_cluster_zone_and_forwards_nothing() -> None:
    corefile = cfg.corefile()
    assert "forward" not in corefile and "rcode NXDOMAIN" in corefile
    assert f"kubernetes {cfg.CLUSTER_DOMAIN}" in corefile
    service = next(d for d in cfg.coredns_manifests("img") if d["kind"] == "Service")
    assert service["metadata"] == {
        "name": "kube-dns",
        "namespace": "kube-system",
        "labels": {"k8s-app": "kube-dns"},
    }
    assert service["spec"]["clusterIP"] == cfg.CLUSTER_DNS_IP


def test_containerd_has_its_own_root_state_and_socket() -> None:
    text = cfg.containerd_config(PATHS, "127.0.0.1:5000/uds-node/pause:3.10")
    assert 'root = "/tmp/state/node/containerd/root"' in text
    assert 'state = "/run/udsvm-x/containerd"' in text and 'address = "/run/udsvm-x/containerd.sock"' in text
    assert "restrict_oom_score_adj = true" in text and "device_ownership_from_security_context = true" in text
    assert 'sandbox_image = "127.0.0.1:5000/uds-node/pause:3.10"' in text
    hosts = cfg.registry_hosts_toml("127.0.0.1:5000")
    assert 'server = "http://127.0.0.1:5000"' in hosts and '"pull", "resolve"' in hosts


def test_the_probe_pod_is_restricted_and_opens_only_its_ports() -> None:
    pod = cfg.busybox_pod("ns", "admin", {"app": "admin"}, image="reg/busybox:1", command=["sleep", "9"])
    (container,) = pod["spec"]["containers"]
    assert container["ports"] == [] and container["command"] == ["sleep", "9"]
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["automountServiceAccountToken"] is False
    served = cfg.busybox_pod("ns", "web", {}, image="i", command=["httpd"], ports=(8080, 9090))
    assert served["spec"]["containers"][0]["ports"] == [{"containerPort": 8080}, {"containerPort": 9090}]
