"""Pure renderers for the real node's configuration files: containerd, CNI, kubelet, kube-proxy, CoreDNS.

No I/O here: `node.py` writes what these return. Keeping them pure lets unit tests pin the settings that make
the node safe on a shared machine (no default route for pods, NodePorts only on the node's own address, no DNS
forwarding off the machine) without starting anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NODE_NAME = "udsvm-node"
BRIDGE = "udsvm-br0"
POD_CIDR = "10.244.0.0/24"
NODE_ADDRESS = "10.244.0.1"
POD_RANGE_START = "10.244.0.10"
SERVICE_CIDR = "10.0.0.0/24"
CLUSTER_DNS_IP = "10.0.0.10"
CLUSTER_DOMAIN = "cluster.local"
CNI_NETWORK = "udsvm-pods"


@dataclass(frozen=True)
class NodePaths:
    """Every file and folder one node uses: all under state_dir, sockets under a short run dir."""

    state_dir: Path
    run_dir: Path

    @property
    def node_dir(self) -> Path:
        return self.state_dir / "node"

    @property
    def containerd_root(self) -> Path:
        return self.node_dir / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.run_dir / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.node_dir / "containerd.toml"

    @property
    def registry_hosts_dir(self) -> Path:
        return self.node_dir / "containerd" / "certs.d"

    @property
    def cni_conf_dir(self) -> Path:
        return self.node_dir / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.node_dir / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.node_dir / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.node_dir / "kubelet.yaml"

    @property
    def kube_proxy_config(self) -> Path:
        return self.node_dir / "kube-proxy.yaml"

    @property
    def resolv_conf(self) -> Path:
        return self.node_dir / "resolv.conf"

    @property
    def pod_logs(self) -> Path:
        return self.node_dir / "pod-logs"

    @property
    def registry_data(self) -> Path:
        return self.node_dir / "registry"

    @property
    def registry_config(self) -> Path:
        return self.node_dir / "registry.yaml"

    @property
    def volumes_dir(self) -> Path:
        return self.node_dir / "volumes"

    @property
    def host_state(self) -> Path:
        """The host before the node (chains, ipsets, netns, sysctls): the cleanup's baseline."""
        return self.node_dir / "host-before.json"

    @property
    def pids(self) -> Path:
        return self.node_dir / "pids.json"

    @property
    def loops(self) -> Path:
        return self.node_dir / "loops.json"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def kubevirt_host_dirs(self) -> dict[str, Path]:
        """Where virt-handler's host folders live on this node, by the path KubeVirt gives them: under the
        node's own folders instead of /var/run and /var/lib, so node-down unmounts and removes them with the
        rest (tools/kubevirt/kubevirt_install.py points the DaemonSet's hostPath volumes here)."""
        return {
            "/var/run/kubevirt": self.run_dir / "kubevirt",
            "/var/run/kubevirt-private": self.run_dir / "kubevirt-private",
            "/var/run/kubevirt-libvirt-runtimes": self.run_dir / "kubevirt-runtimes",
            "/var/lib/kubevirt-node-labeller": self.node_dir / "kubevirt-node-labeller",
            "/var/lib/kubelet": self.kubelet_root,
            "/var/lib/kubelet/pods": self.kubelet_root / "pods",
        }

    @property
    def shared_mounts(self) -> tuple[Path, ...]:
        """Folders made shared mounts before the kubelet starts: virt-handler mounts them Bidirectional, and
        containerd refuses that under a private mount (this host's root is private)."""
        return (self.kubelet_root, self.run_dir / "kubevirt")


def containerd_config(paths: NodePaths, sandbox_image: str) -> str:
    """containerd 1.6 (config version 2) with its own root, state and socket, so it never meets the host's.

    restrict_oom_score_adj: this sandbox cannot lower oom_score_adj; without it every pod sandbox fails with
    runc's "can't get final child's PID from pipe" (reference/real-node.md).
    device_ownership_from_security_context: a raw Block volume appears in the container owned by the pod's
    runAsUser/runAsGroup, as KubeVirt's documentation asks of containerd for non-root pods (the verifier and
    virt-launcher read block disks without root).
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join(
        [
            "version = 2",
            f'root = "{paths.containerd_root}"',
            f'state = "{paths.containerd_state}"',
            "[grpc]",
            f'  address = "{paths.containerd_socket}"',
            "[ttrpc]",
            f'  address = "{paths.containerd_socket}.ttrpc"',
            "[debug]",
            '  address = ""',
            "[metrics]",
            '  address = ""',
            f"[{cri}]",
            f'  sandbox_image = "{sandbox_image}"',
            "  restrict_oom_score_adj = true",
            "  device_ownership_from_security_context = true",
            "  enable_selinux = false",
            f"[{cri}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.cni]",
            '  bin_dir = "/usr/lib/cni"',
            f'  conf_dir = "{paths.cni_conf_dir}"',
            f"[{cri}.registry]",
            f'  config_path = "{paths.registry_hosts_dir}"',
            "",
        ]
    )


def registry_hosts_toml(registry: str) -> str:
    """containerd's hosts.toml for the loopback registry: plain HTTP, pull and resolve only."""
    return "\n".join(
        [
            f'server = "http://{registry}"',
            "",
            f'[host."http://{registry}"]',
            '  capabilities = ["pull", "resolve"]',
            "",
        ]
    )


def cni_conflist(paths: NodePaths) -> dict[str, Any]:
    """Pods on one bridge, addresses from the node's pod CIDR, routes only to pods and Services.

    No default gateway and no IP masquerade: a pod has no route off this machine; every address it can reach
    is a pod, a Service (DNAT'ed by kube-proxy to a pod or to the API server on the node address) or the node.
    """
    return {
        "cniVersion": "0.4.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(paths.cni_ipam_dir),
                    "ranges": [
                        [{"subnet": POD_CIDR, "rangeStart": POD_RANGE_START, "gateway": NODE_ADDRESS}]
                    ],
                    "routes": [{"dst": SERVICE_CIDR}],
                },
            }
        ],
    }


def kubelet_config(paths: NodePaths, client_ca: Path, healthz_port: int) -> dict[str, Any]:
    """The kubelet on the node address only, client-certificate authentication, generous eviction floors.

    Eviction thresholds are low because the test machine's disk is shared: a full-ish disk must not evict the
    operator under test. The API server is the only client (its kubelet-client certificate).
    """
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_ADDRESS,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "clusterDNS": [CLUSTER_DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(paths.resolv_conf),
        "podLogsDir": str(paths.pod_logs),
        "serializeImagePulls": False,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "maxPods": 110,
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
    }


def kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict[str, Any]:
    """kube-proxy in iptables mode; NodePorts only on the node address, never on the machine's own interfaces.

    conntrack sizes stay as the kernel has them (this sandbox may not write those sysctls), and localhost
    NodePorts are off (they need route_localnet on the whole machine).
    """
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "bindAddress": NODE_ADDRESS,
        "clusterCIDR": POD_CIDR,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{NODE_ADDRESS}/32"],
        "conntrack": {"maxPerCore": 0, "min": 0},
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
    }


def corefile() -> str:
    """CoreDNS answers the cluster zone from the API and NXDOMAIN for everything else: no query leaves."""
    return "\n".join(
        [
            f"{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{",
            "    errors",
            "    health :8080",
            "    ready :8181",
            f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{",
            "        pods insecure",
            "    }",
            "    cache 30",
            "    loop",
            "}",
            ".:53 {",
            "    errors",
            "    template ANY ANY {",
            "        rcode NXDOMAIN",
            "    }",
            "}",
            "",
        ]
    )


def coredns_manifests(image: str) -> list[dict[str, Any]]:
    """CoreDNS as upstream clusters run it: a Deployment in kube-system behind the `kube-dns` Service.

    The pods carry `k8s-app: kube-dns`, the label our VMs' NetworkPolicies allow DNS to, so the DNS rule is
    exercised against a real pod, not a host process.
    """
    labels = {"k8s-app": "kube-dns"}
    ns = "kube-system"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": ns}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": ns}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": ns},
            "data": {"Corefile": corefile()},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "coredns", "namespace": ns, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "dnsPolicy": "Default",
                        "containers": [
                            {
                                "name": "coredns",
                                "image": image,
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                ],
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": 8181},
                                    "periodSeconds": 2,
                                },
                                "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}},
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                                },
                                "volumeMounts": [
                                    {"name": "config", "mountPath": "/etc/coredns", "readOnly": True}
                                ],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": ns, "labels": labels},
            "spec": {
                "clusterIP": CLUSTER_DNS_IP,
                "selector": labels,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]


def local_storage_class() -> dict[str, Any]:
    """Static local PVs (made by tests on loop devices), bound when the first consumer is scheduled."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "udsvm-local"},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Retain",
    }


RESTRICTED_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""A container context the `restricted` Pod Security profile admits, with a read-only root."""


def busybox_pod(
    namespace: str,
    name: str,
    labels: dict[str, str],
    *,
    image: str,
    command: list[str],
    ports: tuple[int, ...] = (),
) -> dict[str, Any]:
    """One busybox container under RESTRICTED_CONTEXT: the probe clients and targets of the node tier and the
    demo (probes and the SSH client run in its network namespace from the host)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": command,
                    "ports": [{"containerPort": port} for port in ports],
                    "securityContext": RESTRICTED_CONTEXT,
                }
            ],
        },
    }


def dumps(document: dict[str, Any]) -> str:
    """JSON is valid YAML: the kubelet and kube-proxy read these files as YAML."""
    return json.dumps(document, indent=2) + "\n"
