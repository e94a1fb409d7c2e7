"""Zero trust on the real virt-launcher pod, by packets; and a pool rolling through real VMIs (issue 16, 4-5).

Real: the operator (a host process), virt-api and virt-controller v1.8.4 (they make the VMIs and the
launcher pods), the node that runs those pods, and kube-router enforcing the operator's NetworkPolicy on
them. Played (kubevirt_node, ADR 0008): CDI's import; virt-handler's node labels, tun capacity and the VMI
phase `Running` (under its own service account); and the launcher's process, a stand-in that listens on TCP
2222 and 8080 on the pod's address where a masquerade-bound guest would, because v1.8.4's virt-launcher
does not build here. So what is proven is the network path to the pod virt-controller made, and what the
operator and virt-controller do with VMIs that run; no guest boots.

The pool's members' launcher pods carry the pool label, and a policy of the user's on another pod that
admits only `uds.dev/pool: web` lets them through while it refuses a pod without the label.

Every "blocked" is held against an "allowed" to the same listener (and the listener is first reached from
inside the pod), so a policy engine that blocked everything, or a stand-in that listened on nothing, fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import node_configs as cfg
import probes
import pytest
from kubevirt_node import (  # noqa: F401 (kubevirt_fixture: the session fixture)
    DV_API,
    isolation,
    kubevirt_fixture,
    launcher_pods,
    play_cdi_import,
    play_handler_running,
    the_launcher_pod,
    udsvm,
    udsvm_spec,
    vm_path,
    vmi_path,
    waited,
)
from node_cluster import NodeHandle, running_operator, wait_until

from background_loop import BackgroundLoop
from integration.operator_harness import Api, OperatorProcess
from integration.pool_play import ReadyWatcher, members_path, pool_path
from uds_vm_operator.fleet import POOL_LABEL, REVISION_LABEL

UDS_VM_API = "/apis/uds.dev/v1alpha1"
NETWORK = {
    "allow": [
        {"direction": "Egress", "podSelector": {"matchLabels": {"app": "db"}}, "ports": [{"port": 5432}]},
        {"direction": "Ingress", "podSelector": {"matchLabels": {"app": "admin"}}, "ports": [{"port": 2222}]},
    ]
}


@pytest.fixture
def operator(kubevirt: NodeHandle, ns: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    with running_operator(kubevirt, ns, tmp_path / "logs") as process:
        yield process


@dataclasses.dataclass
class Peers:
    """The pods around the VM: an allowed database, an allowed admin, a stranger, and an outsider in another
    namespace (host PIDs for probes in their network namespaces)."""

    db_ip: str
    admin: int
    stranger: int
    outsider: int


@pytest.fixture
def peers(kubevirt: NodeHandle, ns: str) -> Iterator[Peers]:
    node = kubevirt
    db = node.server_pod(ns, "db", {"app": "db"}, (5432, 8080))
    admin = node.container_pid(node.client_pod(ns, "admin", {"app": "admin"}))
    stranger = node.container_pid(node.client_pod(ns, "stranger", {"app": "stranger"}))
    other_ns = node.namespace("outsider")
    try:
        outsider = node.container_pid(node.client_pod(other_ns, "outsider", {"app": "outsider"}))
        assert probes.tcp(admin, db["status"]["podIP"], 8080) == "connected"  # the db listens on 8080 too
        yield Peers(db["status"]["podIP"], admin, stranger, outsider)
    finally:
        node.delete_namespace(other_ns)


def running_launcher(node: NodeHandle, namespace: str, vm_name: str) -> dict[str, Any]:
    """The VM's launcher pod once it runs on the node (stand-in process, real pod)."""
    pod = the_launcher_pod(node, namespace, vm_name)
    return node.wait_running(namespace, pod["metadata"]["name"])


def assert_isolated(node: NodeHandle, pod: dict[str, Any], peers: Peers) -> None:
    """The policy of NETWORK, by packets, on a running launcher pod."""
    pid, ip = node.container_pid(pod), pod["status"]["podIP"]
    assert probes.tcp(pid, "127.0.0.1", 8080) == "connected", "the stand-in listens on 8080 (from inside)"
    wait_until(
        "the allowed admin to reach the VM on 2222",
        lambda: probes.tcp(peers.admin, ip, 2222) == "connected",
        45,
        0.5,
    )
    assert probes.tcp_blocked(peers.admin, ip, 8080), "the allowed peer on a port it was not given"
    assert probes.tcp_blocked(peers.stranger, ip, 2222), (
        "a pod of the VM's own namespace the policy does not name"
    )
    assert probes.tcp_blocked(peers.outsider, ip, 2222), "ingress from another namespace"
    assert probes.tcp(pid, peers.db_ip, 5432) == "connected", "egress to the allowed peer and port"
    assert probes.tcp_blocked(pid, peers.db_ip, 8080), "egress to the allowed peer on another port"
    assert probes.tcp_blocked(pid, "10.0.0.1", 443), "egress to the API server"
    for protocol in ("udp", "tcp"):
        answer = probes.dns(pid, "kube-dns.kube-system.svc.cluster.local", cfg.CLUSTER_DNS_IP, protocol)
        assert answer.get("addresses") == [cfg.CLUSTER_DNS_IP], f"DNS over {protocol} stays open: {answer}"


def test_the_real_launcher_pod_gets_only_the_traffic_its_policy_allows(
    kubevirt: NodeHandle, operator: OperatorProcess, ns: str, peers: Peers
) -> None:
    node = kubevirt
    node.api.create(udsvm(ns, network=NETWORK), f"{UDS_VM_API}/namespaces/{ns}/udsvirtualmachines")
    play_cdi_import(node, ns, "web-dv")
    pod = running_launcher(node, ns, "web")
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "VirtualMachineInstance"  # virt-controller's pod
    assert isolation(node, ns, "web")[0::2] == ("True", True)  # (NetworkIsolated, zeroTrust)
    assert_isolated(node, pod, peers)


class Players(BackgroundLoop):
    """Plays CDI and virt-handler for every member of the namespace, until the `with` block ends.

    One DataVolume is imported once (its PVC on a new node volume); a VMI virt-controller has scheduled (its
    launcher pod runs) is reported Running. Its own API client: the test's client stays on the test's thread.
    """

    name = "play-cdi-and-handler"

    def __init__(self, node: NodeHandle, namespace: str) -> None:
        super().__init__()
        self._node = dataclasses.replace(node, api=Api(node.kubeconfig))
        self._namespace = namespace
        self._imported: set[str] = set()
        self.running: list[str] = []

    def thread_ended(self) -> None:
        self._node.api.close()

    def tick(self) -> None:
        node, namespace = self._node, self._namespace
        for dv in node.api.items(f"{DV_API}/namespaces/{namespace}/datavolumes"):
            uid = dv["metadata"]["uid"]
            if uid not in self._imported and "deletionTimestamp" not in dv["metadata"]:
                self._imported.add(uid)
                play_cdi_import(node, namespace, dv["metadata"]["name"])
        for vmi in node.api.items(f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances"):
            name, meta = vmi["metadata"]["name"], vmi["metadata"]
            scheduled = (vmi.get("status") or {}).get("phase") == "Scheduled"
            if scheduled and "deletionTimestamp" not in meta and play_handler_running(node, namespace, name):
                self.running.append(name)


POOL = "web"
REPLICAS = 2


def pool(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "uds.dev/v1alpha1",
        "kind": "UDSVirtualMachinePool",
        "metadata": {"name": POOL, "namespace": namespace},
        "spec": {
            "replicas": REPLICAS,
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {**udsvm_spec(), "network": NETWORK},
            },
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "progressDeadlineSeconds": 300,
        },
    }


def rolled_out(node: NodeHandle, namespace: str) -> str | None:
    """The revision every member runs once the pool reports all REPLICAS Ready and updated, else None."""
    status = (node.api.get(pool_path(namespace, POOL)) or {}).get("status") or {}
    members = node.api.items(members_path(namespace), label_selector=f"{POOL_LABEL}={POOL}")
    revision = status.get("updateRevision")
    done = (
        status.get("currentRevision") == revision
        and status.get("readyReplicas") == REPLICAS
        and status.get("updatedReplicas") == REPLICAS
        and sorted(m["metadata"]["name"] for m in members) == [f"{POOL}-{i}" for i in range(REPLICAS)]
        and all(m["metadata"]["labels"][REVISION_LABEL] == revision for m in members)
    )
    return revision if done else None


def all_running(node: NodeHandle, namespace: str) -> dict[str, str] | None:
    """running_vmis once every member's VMI runs, else None (one read per poll)."""
    running = running_vmis(node, namespace)
    return running if len(running) == REPLICAS else None


def running_vmis(node: NodeHandle, namespace: str) -> dict[str, str]:
    """Member name -> UID of its VMI, for the VMIs KubeVirt reports Running and Ready."""
    out = {}
    for i in range(REPLICAS):
        vmi = node.api.get(vmi_path(namespace, f"{POOL}-{i}")) or {}
        status = vmi.get("status") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        if status.get("phase") == "Running" and ready:
            out[f"{POOL}-{i}"] = vmi["metadata"]["uid"]
    return out


def test_a_pool_rolls_through_real_vmis_and_its_members_stay_isolated(
    kubevirt: NodeHandle, operator: OperatorProcess, ns: str, peers: Peers
) -> None:
    node = kubevirt
    with Players(node, ns) as players:
        node.api.create(pool(ns), pool_path(ns))
        first = waited(node, ns, "the pool rolled out", lambda: rolled_out(node, ns), 300)
        before = waited(
            node,
            ns,
            "both members' VMIs Running",
            lambda: all_running(node, ns),
        )
        old_pods = {p["metadata"]["uid"] for m in before for p in launcher_pods(node, ns, m)}

        watcher = ReadyWatcher(node.kubeconfig, ns, POOL).start()
        new_source = {"http": {"url": "https://images.example/web-v2.qcow2"}}
        node.api.merge(pool_path(ns, POOL), {"spec": {"template": {"spec": {"source": new_source}}}})
        second = waited(
            node,
            ns,
            "the pool rolled to the new image",
            lambda: (r := rolled_out(node, ns)) != first and r,
            420,
        )
        watcher.stop()
        after = waited(
            node,
            ns,
            "the new members' VMIs Running",
            lambda: all_running(node, ns),
        )

    assert second != first
    assert watcher.min_ready >= REPLICAS, watcher.ready_counts  # maxUnavailable 0, with real VMIs
    assert watcher.max_members <= REPLICAS + 1, watcher.member_counts  # maxSurge 1
    assert not set(before.values()) & set(after.values()), "every member's VMI was replaced"
    assert len(players.running) >= 2 * REPLICAS + 1, players.running  # the surge member ran too
    for member in after:
        vm = node.api.get(vm_path(ns, member)) or {}
        assert (vm.get("status") or {}).get("printableStatus") == "Running", vm.get("status")
        assert vm["spec"]["template"]["spec"]["volumes"]  # the member's VM carries its disk
        dv = node.api.get(f"{DV_API}/namespaces/{ns}/datavolumes/{member}-dv") or {}
        assert dv["spec"]["source"]["http"]["url"].endswith("web-v2.qcow2"), dv.get("spec")
        pods = launcher_pods(node, ns, member)
        assert len(pods) == 1 and pods[0]["metadata"]["uid"] not in old_pods, pods
        pod = node.wait_running(ns, pods[0]["metadata"]["name"])
        labels = pod["metadata"]["labels"]
        # The pool's and its template's labels reach the pod, so a policy elsewhere can select the pool.
        assert (labels.get("app"), labels.get(POOL_LABEL)) == ("web", POOL), labels
        assert_isolated(node, pod, peers)
    assert_a_policy_elsewhere_selects_the_pool(node, ns, peers, list(after))


def db_admits_only_the_pool(namespace: str) -> dict[str, Any]:
    """A user's policy on the database: ingress on 5432 only from the pool's members, by the pool label."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "db-admits-the-web-pool", "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": {"app": "db"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": {POOL_LABEL: POOL}}}],
                    "ports": [{"protocol": "TCP", "port": 5432}],
                }
            ],
        },
    }


def assert_a_policy_elsewhere_selects_the_pool(
    node: NodeHandle, namespace: str, peers: Peers, members: list[str]
) -> None:
    """The pool label on the real launcher pods is what a policy of the user's can select them by: once the
    database admits only the pool, every member still reaches it and the admin (no pool label) no longer."""
    assert probes.tcp(peers.admin, peers.db_ip, 5432) == "connected", "the admin reaches the db before"
    node.api.create(
        db_admits_only_the_pool(namespace),
        f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
    )
    wait_until(
        "the db's policy to refuse the admin, who is no pool member",
        lambda: probes.tcp_blocked(peers.admin, peers.db_ip, 5432),
        45,
        0.5,
    )
    for member in members:
        pid = node.container_pid(the_launcher_pod(node, namespace, member))
        assert probes.tcp(pid, peers.db_ip, 5432) == "connected", f"{member}, selected by {POOL_LABEL}"
